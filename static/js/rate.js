// The rating page: answer with the arrow keys, measure the time to answer, go back to the
// recruiting platform when done. htmx swaps each next comparison in (see _comparison.html).
(() => {
  "use strict";
  let shownAt = performance.now();
  let leaving = false;
  const keys = { ArrowLeft: "left", ArrowRight: "right", ArrowDown: "cant_tell" };

  function elapsed() {
    return String(Math.round(performance.now() - shownAt));
  }

  function shown() {
    shownAt = performance.now();
    const done = document.querySelector("#comparison [data-redirect]");
    if (done && !leaving) {
      leaving = true; // once: a second navigation would cut the first one short
      setTimeout(() => window.location.assign(done.dataset.redirect), 4000);
    }
  }

  document.addEventListener("DOMContentLoaded", shown);
  document.addEventListener("htmx:afterSettle", shown);
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
