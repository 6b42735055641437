// The rating page: answer with the arrow keys, measure the time to answer, go back to the
// recruiting platform when done. htmx swaps each next comparison in (see _comparison.html).
(() => {
  "use strict";
  let shownAt = performance.now();
  let leaving = false;
  let pointer = null; // where the pointer is, and where it rested when a comparison came
  let restedAt = null;
  const keys = { ArrowLeft: "left", ArrowRight: "right", ArrowDown: "cant_tell" };

  function elapsed() {
    return String(Math.round(performance.now() - shownAt));
  }

  // The clock starts when a comparison enters the page (htmx:afterSwap), not when htmx
  // settles it 20 ms later: an answer in between was timed from the previous comparison,
  // and one just after settling came out as 0 ms.
  function shown() {
    shownAt = performance.now();
    restedAt = pointer;
    document.getElementById("comparison")?.classList.add("fresh");
    const done = document.querySelector("#comparison [data-redirect]");
    if (done && !leaving) {
      leaving = true; // once: a second navigation would cut the first one short
      setTimeout(() => window.location.assign(done.dataset.redirect), 4000);
    }
  }

  document.addEventListener("DOMContentLoaded", shown);
  document.addEventListener("htmx:afterSwap", shown);
  // The pointer rests where the last click was: the candidate now under it is not the
  // rater's choice, so it looks chosen only once the pointer moves.
  document.addEventListener("pointermove", (event) => {
    pointer = { x: event.clientX, y: event.clientY };
    const moved = !restedAt || Math.hypot(pointer.x - restedAt.x, pointer.y - restedAt.y) > 3;
    if (moved) document.getElementById("comparison")?.classList.remove("fresh");
  });
  document.addEventListener("pointerdown", (event) => {
    pointer = { x: event.clientX, y: event.clientY };
  });
  document.addEventListener("htmx:configRequest", (event) => {
    if (event.detail.parameters instanceof FormData) {
      event.detail.parameters.set("response_time_ms", elapsed());
    } else {
      event.detail.parameters.response_time_ms = elapsed();
    }
  });
  // Without htmx (scripts blocked, or an old browser) the form posts normally.
  document.addEventListener("submit", (event) => {
    const field = event.target.querySelector("input[name=response_time_ms]");
    if (field) field.value = elapsed();
  });
  document.addEventListener("keydown", (event) => {
    if (event.altKey || event.ctrlKey || event.metaKey || event.repeat) return;
    const choice = keys[event.key];
    if (!choice) return;
    const button = document.querySelector(`#comparison button[value="${choice}"]`);
    if (button && !button.disabled) {
      event.preventDefault();
      button.click();
    }
  });
})();
