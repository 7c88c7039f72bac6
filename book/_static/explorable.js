// Kernel-free explorable figures (see isolab/book/explorable.py), and display maths fitted
// to narrow screens.
// Each <div class="isolab-explorable"> carries its controls, an <img>, and a JSON payload
// {sliders: [{name, label, values, default}], frames: [dataURI...], index: {"i-j-k": n}}.
// A control is a range input (an ordered quantity) or a group of toggle buttons (a
// categorical choice, <div class="isolab-toggle" data-index="i">); changing one looks up
// the frame precomputed at build time for the new combination of indices.
// A root with data-strips="0,a,b,1" (narrow="panels") shows its frame cut into one strip
// per panel, in a wrapping row: joined into the whole figure where the column is wide
// enough, stacked (each panel the column's width) on a phone. Every strip shows the same
// frame, shifted; the first carries the alt text, the others are hidden from screen readers.
(function () {
  "use strict";
  function indexOf(control) {
    return Number(control.tagName === "INPUT" ? control.value : control.dataset.index);
  }
  function strips(root, img) {
    var cuts = root.dataset.strips.split(",").map(Number);
    var width = Number(root.dataset.displayWidth);
    var holder = document.createElement("div");
    holder.className = "isolab-strips";
    holder.style.maxWidth = width + "px";   // never wider than drawn: the frames keep 2x pixels
    for (var i = 0; i + 1 < cuts.length; i++) {
      var start = cuts[i], share = cuts[i + 1] - cuts[i];
      var strip = document.createElement("div");
      strip.className = "isolab-strip";
      // basis a little under the strip's share of the figure so that the whole row fits
      // the column it was drawn for; grow in proportion, to at most 1.5 times that share
      strip.style.flex = share + " 1 " + (0.985 * share * width).toFixed(2) + "px";
      strip.style.maxWidth = "min(100%, " + (1.5 * share * width).toFixed(2) + "px)";
      var copy = img.cloneNode(false);
      copy.style.width = (100 / share).toFixed(4) + "%";
      copy.style.maxWidth = "none";
      copy.style.marginLeft = (-100 * start / share).toFixed(4) + "%";
      if (i > 0) { copy.alt = ""; copy.setAttribute("aria-hidden", "true"); }
      strip.appendChild(copy);
      holder.appendChild(strip);
    }
    img.parentNode.replaceChild(holder, img);
  }
  function wire(root) {
    var data = JSON.parse(root.querySelector("script.isolab-explorable-data").textContent);
    if (root.dataset.strips) { strips(root, root.querySelector("img.isolab-frame")); }
    var images = Array.prototype.slice.call(root.querySelectorAll("img.isolab-frame"));
    var controls = Array.prototype.slice.call(
      root.querySelectorAll("input[type=range][data-name], div.isolab-toggle[data-name]"));
    function update() {
      var key = controls.map(indexOf).join("-");
      var frame = data.index[key];
      if (frame === undefined) { return; }
      images.forEach(function (img) { img.src = data.frames[frame]; });
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
  // On a narrow screen, display maths wider than the column is scaled down to fit, to no
  // less than MIN_MATH_SCALE of its size; what is still too wide scrolls inside its own box
  // (CSS). A wide screen is left alone: there an equation too wide is the page's to fix
  // (the browser test reports it).
  var MIN_MATH_SCALE = 0.7, NARROW_SCREEN = 600;
  function fitMaths() {
    var narrow = document.documentElement.clientWidth < NARROW_SCREEN;
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (box) {
      var maths = box.querySelector("mjx-math");
      if (!maths) { return; }
      maths.style.fontSize = "";
      if (narrow && box.scrollWidth > box.clientWidth + 1 && box.clientWidth > 0) {
        var scale = Math.max(MIN_MATH_SCALE, 0.98 * box.clientWidth / box.scrollWidth);
        maths.style.fontSize = (100 * scale).toFixed(1) + "%";
      }
    });
  }
  function whenMathsIsTypeset() {
    if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
      window.MathJax.startup.promise.then(fitMaths);
    }
  }
  function init() {
    document.querySelectorAll("div.isolab-explorable").forEach(wire);
    if (document.readyState === "complete") { whenMathsIsTypeset(); } else {
      window.addEventListener("load", whenMathsIsTypeset);
    }
    var pending = null;
    window.addEventListener("resize", function () {
      clearTimeout(pending);
      pending = setTimeout(fitMaths, 150);
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
