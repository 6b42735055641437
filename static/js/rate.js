// The rating page: answer with the arrow keys (a screen of several items: number keys; a
// sorting screen: the arrow keys place one item after another),
// measure the time to answer, go back to the recruiting platform when done. htmx swaps
// each next comparison in (see _comparison.html and _screen.html).
(() => {
  "use strict";
  let shownAt = performance.now();
  let leaving = false;
  let sending = null; // the answer in flight: { button, time }
  let pressed = null; // the submit button of the last answer given
  let order = []; // a rank screen's picks, in the order picked
  let placed = []; // a sorting screen's items, in the order placed (Backspace undoes)
  let resending = false; // it failed to arrive and is being sent again
  let pointer = null; // where the pointer is, and where it rested when a comparison came
  let restedAt = null;
  // On a right-to-left page the first candidate ("left") is drawn on the right: each
  // arrow picks the one on its side of the screen.
  const rtl = document.documentElement.dir === "rtl";
  const keys = rtl
    ? { ArrowLeft: "right", ArrowRight: "left", ArrowDown: "cant_tell" }
    : { ArrowLeft: "left", ArrowRight: "right", ArrowDown: "cant_tell" };

  function elapsed() {
    return String(Math.round(performance.now() - shownAt));
  }

  // The clock starts when a comparison enters the page (htmx:afterSwap), not when htmx
  // settles it 20 ms later: an answer in between was timed from the previous comparison,
  // and one just after settling came out as 0 ms.
  let drawing = 0; // which comparison's images are awaited: a later one cancels the wait

  // The rater sees the comparison whole once its images are drawn: the clock starts then
  // (on a slow link 0.6 s later than the swap). An answer given before that is timed
  // from the swap, as it came before the images.
  function timeFromDrawn() {
    const mine = ++drawing;
    const images = [...document.querySelectorAll("#comparison img")];
    const pending = images.filter((image) => !(image.complete && image.naturalWidth));
    if (!pending.length) return;
    Promise.all(
      pending.map(
        (image) =>
          new Promise((done) => {
            image.addEventListener("load", done, { once: true });
            image.addEventListener("error", done, { once: true });
          }),
      ),
    ).then(() => {
      if (mine === drawing && !sending && !onBreak()) shownAt = performance.now();
    });
  }

  // A screen reader hears each new screen: its heading, the progress and the question
  // (the swapped form is replaced whole, so the live line stands outside it).
  function announce() {
    const line = document.getElementById("announcer");
    const form = document.getElementById("comparison");
    if (!line || !form) return;
    const said = (selector) => form.querySelector(selector)?.textContent.trim() ?? "";
    line.textContent = [said("h1"), said(".progress .count"), said(".question")]
      .filter(Boolean)
      .join(". ");
  }

  function shown() {
    announce();
    remember();
    readyPlayers();
    preloadAhead();
    shownAt = performance.now();
    timeFromDrawn();
    restedAt = pointer;
    order = [];
    placed = [];
    showPicks();
    showSides();
    document.getElementById("comparison")?.classList.add("fresh");
    startBreak();
    const done = document.querySelector("#comparison [data-redirect]");
    if (done && !leaving) {
      leaving = true; // once: a second navigation would cut the first one short
      setTimeout(() => window.location.assign(done.dataset.redirect), 4000);
    }
  }

  // Between blocks: the next comparison is on the page already, shown (and timed) once
  // the rater ends the break, no sooner than its shortest length.
  function onBreak() {
    return document.getElementById("comparison")?.classList.contains("on-break") ?? false;
  }

  function startBreak() {
    const pause = document.querySelector("#comparison .break-screen");
    if (!pause) return;
    const form = document.getElementById("comparison");
    const button = pause.querySelector(".continue");
    const seconds = pause.querySelector(".seconds");
    let left = Number(pause.dataset.minSeconds) || 0;
    form.classList.add("on-break");
    const ready = () => {
      button.disabled = false;
      pause.querySelector(".wait")?.remove();
      button.focus();
    };
    button.disabled = left > 0;
    if (left > 0) {
      const tick = setInterval(() => {
        left -= 1;
        if (seconds) seconds.textContent = String(Math.max(left, 0));
        if (left <= 0) {
          clearInterval(tick);
          ready();
        }
      }, 1000);
    } else {
      ready();
    }
    button.addEventListener(
      "click",
      () => {
        form.classList.remove("on-break");
        pause.remove();
        shownAt = performance.now();
        timeFromDrawn();
        restedAt = pointer;
      },
      { once: true },
    );
  }

  // The next screen arrives whole: its images are fetched and decoded before it replaces
  // the current one (which stays, answered, in the meantime), so no blank box ever shows
  // and the rater's clock starts on a complete screen. Clicks and keys wait meanwhile; a
  // link too slow for LONGEST_WAIT_MS gets the screen anyway, its images still coming.
  const LONGEST_WAIT_MS = 3000;
  let preloading = false;

  // The images this page drew or decoded lately, each held by an element that shows or
  // loaded it, so that the browser is less inclined to drop them from its memory (it
  // promises nothing: the swap below asks again). The least recently shown go beyond
  // HELD_IMAGES, so a long session does not fill a phone's memory.
  const HELD_IMAGES = 60;
  const holding = new Map(); // address → an element holding it

  function hold(image) {
    holding.delete(image.src); // (to the end: the most recently used)
    holding.set(image.src, image);
    while (holding.size > HELD_IMAGES) holding.delete(holding.keys().next().value);
  }

  function held(image) {
    return image.decode().then(
      () => hold(image),
      () => {}, // a broken image shows as it would have
    );
  }

  function inMemory(address) {
    const image = new Image();
    image.src = address;
    if (!image.complete || !image.naturalWidth) return false;
    hold(image);
    return true;
  }

  function remember() {
    for (const image of document.querySelectorAll("#comparison img")) {
      if (image.complete && image.naturalWidth) hold(image);
      else held(image);
    }
  }

  function decode(addresses) {
    return Promise.all(
      addresses.map((address) => {
        const image = new Image();
        image.src = address;
        return held(image);
      }),
    );
  }

  function preload(addresses) {
    const late = new Promise((done) => setTimeout(done, LONGEST_WAIT_MS));
    return Promise.race([decode(addresses), late]);
  }

  // The comparison likely next (a check or a random question, drawn as this one was
  // served: the form's .upcoming hints) is loaded while the rater answers this one: its
  // images decoded, its clips ready to play. The answer's response then swaps in at
  // once, without the wait above.
  function preloadAhead() {
    const hints = [...document.querySelectorAll("#comparison .upcoming")].map((hint) => [
      new URL(hint.dataset.src, document.baseURI).href,
      hint.dataset.kind,
    ]);
    const images = hints.filter(([address, kind]) => kind === "image" && !inMemory(address));
    decode([...new Set(images.map(([address]) => address))]);
    const clips = new Map(
      hints.filter(([address, kind]) => kind !== "image" && !loadedClips.has(address)),
    );
    if (clips.size) preloadClips(clips);
  }

  document.addEventListener("htmx:beforeSwap", (event) => {
    const detail = event.detail;
    if (detail.target?.id !== "comparison" || !detail.shouldSwap || detail.isError) return;
    stopAll(null); // the answered screen's clip stops with it
    const next = new DOMParser().parseFromString(detail.serverResponse, "text/html");
    // Only an image the browser has in memory now is drawn the moment it is swapped in:
    // one decoded before may have been dropped since (Chromium keeps no promise), so
    // each is asked for again, and those not there at once are waited for.
    const addresses = [...new Set([...next.images].map((image) => image.src))].filter(
      (address) => !inMemory(address),
    );
    // Each clip as the next screen has it (an audio or a video element: an M4A or an
    // audio-only WebM is a sound, whatever its file's name).
    const clips = new Map(
      [...next.querySelectorAll("audio[src], video[src]")]
        .map((media) => [
          new URL(media.getAttribute("src"), document.baseURI).href,
          media.localName,
        ])
        .filter(([address]) => !loadedClips.has(address)),
    );
    if (!addresses.length && !clips.size) return; // all drawn before: swap now
    detail.shouldSwap = false;
    preloading = true;
    const html = detail.serverResponse;
    Promise.all([preload(addresses), preloadClips(clips)]).then(
      () => {
        preloading = false;
        htmx.swap(detail.target, html, { swapStyle: "innerHTML" });
      },
    );
  });

  // Sounds and videos: each item plays from its own button, one at a time. Every play is
  // counted (sent with the answer); with the study's play_to_end the answer waits until
  // each clip was played to its end once. The next screen's clips load before it shows,
  // and the loaded elements take their places in it, ready to play at once.
  const loadedClips = new Map(); // address → a media element that can play through
  let plays = {};
  let heard = new Set();

  function preloadClips(clips) {
    const each = [...clips].map(
      ([address, kind]) =>
        new Promise((done) => {
          const media = document.createElement(kind);
          media.preload = "auto";
          media.addEventListener("canplaythrough", () => done(loadedClips.set(address, media)), {
            once: true,
          });
          media.addEventListener("error", done, { once: true });
          media.src = address;
          media.load();
        }),
    );
    const late = new Promise((done) => setTimeout(done, LONGEST_WAIT_MS));
    return Promise.race([Promise.all(each), late]);
  }

  function readyPlayers() {
    plays = {};
    heard = new Set();
    for (const clip of document.querySelectorAll("#comparison .clip")) {
      let media = clip.querySelector(".media");
      const loaded = loadedClips.get(media.src);
      if (loaded && loaded.tagName === media.tagName) {
        loaded.className = media.className;
        loaded.setAttribute("aria-label", media.getAttribute("aria-label") ?? "");
        if (media.hasAttribute("playsinline")) loaded.setAttribute("playsinline", "");
        media.replaceWith(loaded);
        media = loaded;
      }
      loadedClips.set(media.src, media);
      media.controls = false; // the Play button stands for them
      if (media.currentTime) media.currentTime = 0; // (a seek: it could play through before)
      plays[clip.dataset.key] = 0;
      const button = clip.querySelector(".play");
      button.hidden = false;
      media.onplay = () => {
        plays[clip.dataset.key] += 1;
        showPlaying(button, true);
      };
      media.onpause = () => showPlaying(button, false);
      media.onended = () => {
        // Back to its start at once: a replay, or the next screen showing it again, finds
        // it ready to play rather than seeking then.
        media.currentTime = 0;
        heard.add(clip.dataset.key);
        clip.classList.add("heard");
        showPlaying(button, false);
        holdAnswers();
      };
    }
    holdAnswers();
  }

  function showPlaying(button, playing) {
    button.setAttribute("aria-pressed", String(playing));
    button.querySelector(".glyph").textContent = playing ? "■" : "▶";
    button.querySelector(".play-word").textContent = playing
      ? button.dataset.stop
      : button.dataset.play;
  }

  // Until every clip was heard whole (where the study asks it), what answers waits.
  function holdAnswers() {
    const rule = document.querySelector("#comparison [data-play-to-end]");
    const clips = document.querySelectorAll("#comparison .clip");
    const waiting = rule !== null && heard.size < clips.length;
    if (rule) rule.hidden = !waiting;
    for (const control of document.querySelectorAll(
      "#comparison .choose, #comparison .choose .pick-box, #comparison .cant-tell, " +
        "#comparison .sortee input[type=radio]",
    )) {
      control.disabled = waiting;
    }
    document.getElementById("comparison")?.classList.toggle("unheard", waiting);
  }

  function stop(media) {
    media.pause();
    media.currentTime = 0;
  }

  function stopAll(except) {
    for (const media of document.querySelectorAll("#comparison .media")) {
      if (media !== except && !media.paused) stop(media);
    }
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest?.("#comparison .play");
    if (!button) return;
    const media = button.closest(".clip").querySelector(".media");
    if (!media.paused) {
      stop(media);
      return;
    }
    stopAll(media);
    media.play().catch(() => {}); // a browser that refuses shows the button unchanged
  });
  // Nothing is sent while the next screen's images load: the screen shown is answered.
  document.addEventListener("htmx:confirm", (event) => {
    const unheard = document.getElementById("comparison")?.classList.contains("unheard");
    if (preloading || unheard) event.preventDefault();
  });

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
  // A rank screen: each tap on an item picks it (its number shows the order) or takes
  // it back; Submit is enabled once the screen's number of picks is reached.
  function rankGrid() {
    return document.querySelector("#comparison .screen-grid[data-picks]");
  }

  function showPicks() {
    const grid = rankGrid();
    if (!grid) return;
    const wanted = Number(grid.dataset.picks);
    for (const label of grid.querySelectorAll(".pick")) {
      const at = order.indexOf(label.dataset.key);
      label.classList.toggle("picked", at >= 0);
      label.querySelector(".order").textContent = at >= 0 ? String(at + 1) : "";
    }
    const count = document.querySelector("#comparison .picked-count");
    if (count) count.textContent = String(order.length);
    const send = document.querySelector("#comparison .send-picks");
    if (send) send.disabled = order.length !== wanted;
  }

  // A sorting screen: each item is placed by a tap on its ◀ or ▶ (or ?), or by the arrow
  // keys on the highlighted one (the first not placed yet); Submit once all are placed.
  function sortGrid() {
    return document.querySelector("#comparison .sort-grid");
  }

  function sideOf(sortee) {
    return sortee.querySelector("input[type=radio]:checked")?.value ?? null;
  }

  function showSides() {
    const grid = sortGrid();
    if (!grid) return;
    const sortees = [...grid.querySelectorAll(".sortee")];
    let current = null;
    for (const sortee of sortees) {
      const side = sideOf(sortee);
      sortee.classList.toggle("to-left", side === "left");
      sortee.classList.toggle("to-right", side === "right");
      sortee.classList.toggle("to-cant", side === "cant_tell");
      if (!side && !current) current = sortee;
      sortee.classList.toggle("current", sortee === current);
    }
    const done = sortees.filter(sideOf).length;
    const count = document.querySelector("#comparison .sorted-count");
    if (count) count.textContent = String(done);
    const send = document.querySelector("#comparison .send-sides");
    if (send) send.disabled = done !== sortees.length;
  }

  function place(sortee, side) {
    const radio = sortee.querySelector(`input[type=radio][value="${side}"]`);
    if (!radio) return false;
    radio.checked = true;
    placed = placed.filter((key) => key !== sortee.dataset.key);
    placed.push(sortee.dataset.key);
    showSides();
    return true;
  }

  document.addEventListener("change", (event) => {
    const box = event.target;
    if (box.type === "radio" && box.closest?.("#comparison .sortee")) {
      const sortee = box.closest(".sortee");
      placed = placed.filter((key) => key !== sortee.dataset.key);
      placed.push(sortee.dataset.key);
      showSides();
      return;
    }
    const grid = rankGrid();
    if (!grid || !box.classList?.contains("pick-box") || resending) return;
    const key = box.value;
    if (box.checked && order.length >= Number(grid.dataset.picks)) {
      box.checked = false; // enough picked: take one back first
    } else if (box.checked) {
      order.push(key);
    } else {
      order = order.filter((picked) => picked !== key);
    }
    showPicks();
  });

  document.addEventListener("click", (event) => {
    const button = event.target.closest?.("#comparison button[type=submit]");
    if (button) pressed = button;
  });

  document.addEventListener("htmx:configRequest", (event) => {
    const parameters = event.detail.parameters;
    const time = resending && sending ? sending.time : elapsed();
    const ranked = rankGrid() !== null && !(pressed && pressed.name === "choice");
    if (document.querySelector("#comparison input[name=plays]")) {
      const counted = JSON.stringify(plays);
      if (parameters instanceof FormData) parameters.set("plays", counted);
      else parameters.plays = counted;
    }
    if (parameters instanceof FormData) {
      parameters.set("response_time_ms", time);
      if (ranked) {
        parameters.delete("picks");
        for (const key of order) parameters.append("picks", key);
      }
    } else {
      parameters.response_time_ms = time;
      if (ranked) parameters.picks = order.slice();
    }
    sending = { button: pressed, time };
  });
  // Without htmx (scripts blocked, or an old browser) the form posts normally.
  document.addEventListener("submit", (event) => {
    const field = event.target.querySelector("input[name=response_time_ms]");
    if (field) field.value = elapsed();
    const counted = event.target.querySelector("input[name=plays]");
    if (counted) counted.value = JSON.stringify(plays);
  });
  // An answer whose response never came (offline, a restarting server, a busy database)
  // is sent again, with the same choice and time to answer, until the server takes it:
  // answers are idempotent, so it is stored once. The rater sees a quiet notice, and the
  // comparison stays put (clicks and keys wait) until the answer is through.
  let wait = 500;

  // What the page says, in its language (the server wrote it on the notice's line).
  function said(what) {
    return document.getElementById("connection")?.dataset[what] ?? "";
  }

  function notice(text) {
    const line = document.getElementById("connection");
    if (!line) return;
    line.textContent = text;
    line.hidden = !text;
  }

  function resend() {
    const button = sending?.button;
    if (button?.isConnected) button.click(); // the same query id: the form was not swapped
  }

  document.addEventListener("htmx:afterRequest", (event) => {
    const form = event.target;
    if (form.id !== "comparison" || !sending) return;
    const status = event.detail.xhr.status;
    if (event.detail.successful) {
      sending = null;
      resending = false;
      wait = 500;
      form.classList.remove("resending");
      notice("");
      return;
    }
    if (status === 0 || status === 429 || status >= 500) {
      resending = true;
      form.classList.add("resending");
      notice(said("reconnecting"));
      const asked = Number(event.detail.xhr.getResponseHeader("Retry-After"));
      setTimeout(resend, asked > 0 ? asked * 1000 : wait);
      wait = Math.min(wait * 2, 8000);
      return;
    }
    sending = null;
    resending = false;
    form.classList.remove("resending");
    notice(said("failed"));
  });

  function sortingKey(event) {
    const grid = sortGrid();
    if (!grid) return false;
    if (keys[event.key]) {
      const current = grid.querySelector(".sortee.current");
      if (current) place(current, keys[event.key]);
      return true;
    }
    if (event.key === "Enter") {
      const send = document.querySelector("#comparison .send-sides");
      if (send && !send.disabled) send.click();
      return true;
    }
    if (event.key === "Backspace" && placed.length) {
      const last = placed.pop();
      const sortee = grid.querySelector(`.sortee[data-key="${CSS.escape(last)}"]`);
      for (const radio of sortee?.querySelectorAll("input[type=radio]") ?? []) radio.checked = false;
      showSides();
      return true;
    }
    return event.key === "Backspace";
  }

  document.addEventListener("keydown", (event) => {
    if (event.altKey || event.ctrlKey || event.metaKey || event.repeat || resending) return;
    // Enter and the space bar on a Play button play its clip (Enter sends a rank screen
    // anywhere else).
    if ((event.key === "Enter" || event.key === " ") && event.target.closest?.(".play")) return;
    if (preloading) {
      event.preventDefault(); // the next screen is on its way: this one is answered
      return;
    }
    if (onBreak()) {
      // Nothing answers during a break; Enter or the space bar (the focused button) ends it.
      if (event.key !== "Enter" && event.key !== " ") event.preventDefault();
      return;
    }
    if (sortingKey(event)) {
      event.preventDefault();
      return;
    }
    const place = document.querySelector(`#comparison .pick[data-place="${CSS.escape(event.key)}"]`);
    if (place) {
      event.preventDefault();
      place.click(); // odd one out: answers; rank: picks or takes back
      return;
    }
    if (rankGrid() && (event.key === "Backspace" || event.key === "Enter")) {
      event.preventDefault();
      if (event.key === "Enter") {
        const send = document.querySelector("#comparison .send-picks");
        if (send && !send.disabled) send.click();
      } else if (order.length) {
        const last = order[order.length - 1];
        const box = document.querySelector(`#comparison .pick-box[value="${CSS.escape(last)}"]`);
        if (box) box.click();
      }
      return;
    }
    const choice = keys[event.key];
    if (!choice) return;
    const button = document.querySelector(`#comparison button[value="${choice}"]`);
    if (button && !button.disabled) {
      event.preventDefault();
      button.click();
    }
  });
})();
