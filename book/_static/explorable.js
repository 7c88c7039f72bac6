// Kernel-free explorable figures (see isolab/book/explorable.py).
// Each <div class="isolab-explorable"> carries its sliders, an <img>, and a JSON payload
// {sliders: [{name, label, values, default}], frames: [dataURI...], index: {"i-j-k": n}}.
// Moving a slider looks up the frame precomputed at build time for the new combination.
(function () {
  "use strict";
  function wire(root) {
    var data = JSON.parse(root.querySelector("script.isolab-explorable-data").textContent);
    var img = root.querySelector("img.isolab-frame");
    var inputs = Array.prototype.slice.call(root.querySelectorAll("input[type=range]"));
    function update() {
      var key = inputs.map(function (input) { return input.value; }).join("-");
      var frame = data.index[key];
      if (frame === undefined) { return; }
      img.src = data.frames[frame];
      inputs.forEach(function (input, i) {
        input.nextElementSibling.textContent = data.sliders[i].values[Number(input.value)];
      });
      root.dataset.frameKey = key;
    }
    inputs.forEach(function (input) { input.addEventListener("input", update); });
    update();
    root.dataset.ready = "true";
  }
  function init() {
    document.querySelectorAll("div.isolab-explorable").forEach(wire);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
