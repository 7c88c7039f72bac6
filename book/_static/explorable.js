// Kernel-free explorable figures (see isolab/book/explorable.py).
// Each <div class="isolab-explorable"> carries its controls, an <img>, and a JSON payload
// {sliders: [{name, label, values, default}], frames: [dataURI...], index: {"i-j-k": n}}.
// A control is a range input (an ordered quantity) or a group of toggle buttons (a
// categorical choice, <div class="isolab-toggle" data-index="i">); changing one looks up
// the frame precomputed at build time for the new combination of indices.
(function () {
  "use strict";
  function indexOf(control) {
    return Number(control.tagName === "INPUT" ? control.value : control.dataset.index);
  }
  function wire(root) {
    var data = JSON.parse(root.querySelector("script.isolab-explorable-data").textContent);
    var img = root.querySelector("img.isolab-frame");
    var controls = Array.prototype.slice.call(
      root.querySelectorAll("input[type=range][data-name], div.isolab-toggle[data-name]"));
    function update() {
      var key = controls.map(indexOf).join("-");
      var frame = data.index[key];
      if (frame === undefined) { return; }
      img.src = data.frames[frame];
      controls.forEach(function (control, i) {
        var chosen = indexOf(control);
        if (control.tagName === "INPUT") {
          control.nextElementSibling.textContent = data.sliders[i].values[chosen];
          control.setAttribute("aria-valuetext", data.sliders[i].values[chosen]);
        } else {
          control.querySelectorAll("button").forEach(function (button) {
            button.setAttribute("aria-pressed", Number(button.dataset.index) === chosen ? "true" : "false");
          });
        }
      });
      root.dataset.frameKey = key;
    }
    controls.forEach(function (control) {
      if (control.tagName === "INPUT") {
        control.addEventListener("input", update);
        return;
      }
      var buttons = Array.prototype.slice.call(control.querySelectorAll("button"));
      buttons.forEach(function (button, i) {
        button.addEventListener("click", function () {
          control.dataset.index = button.dataset.index;
          update();
        });
        // the arrow keys step through the group, as they step a range slider
        button.addEventListener("keydown", function (event) {
          var step = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 }[event.key];
          if (!step) { return; }
          event.preventDefault();
          var next = buttons[(i + step + buttons.length) % buttons.length];
          next.focus();
          next.click();
        });
      });
    });
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
