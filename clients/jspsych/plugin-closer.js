/* jsPsych plugin "closer": a trial that joins a Closer study and shows each screen the
 * study serves (triplet, odd one out, rank, sorting, or any format that asks for picks)
 * until the participant's session is over, posting each answer as it is given. Built
 * for jsPsych 7 and 8 (the browser build's global jsPsychModule), from the npm registry.
 *
 *   <script src="jspsych/dist/index.browser.min.js"></script>
 *   <script src="plugin-closer.js"></script>
 *   const jsPsych = initJsPsych();
 *   jsPsych.run([{type: jsPsychCloser, server: "https://closer.example.org",
 *                 study: "the-study-link-slug", participant: "PROLIFIC-ID"}]);
 *
 * Closer must let the lab's origin call it: CLOSER_RATER_ORIGINS. The trial's data:
 * rater_token, answered, complete, completion_code, step (where the session stopped),
 * and screens (each screen's query id, format, answer and response time).
 */
var jsPsychCloser = (function (jspsych) {
  "use strict";

  const info = {
    name: "closer",
    version: "1.0.0",
    parameters: {
      /** Where Closer is: https://closer.example.org */
      server: { type: jspsych.ParameterType.STRING, default: undefined },
      /** The study link's slug (the part after /r/ in its address). */
      study: { type: jspsych.ParameterType.STRING, default: undefined },
      /** The participant's id on the recruiting platform (null: an anonymous one). */
      participant: { type: jspsych.ParameterType.STRING, default: null },
      /** The question above each screen (null: the study's own). */
      question: { type: jspsych.ParameterType.HTML_STRING, default: null },
    },
    data: {
      rater_token: { type: jspsych.ParameterType.STRING },
      answered: { type: jspsych.ParameterType.INT },
      complete: { type: jspsych.ParameterType.BOOL },
      completion_code: { type: jspsych.ParameterType.STRING },
      step: { type: jspsych.ParameterType.STRING },
      screens: { type: jspsych.ParameterType.COMPLEX },
    },
  };

  function element(tag, attributes, children) {
    const made = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (name === "text") made.textContent = value;
      else if (name === "on") made.addEventListener("click", value);
      else made.setAttribute(name, value);
    }
    for (const child of children || []) made.appendChild(child);
    return made;
  }

  class CloserPlugin {
    constructor(jsPsych) {
      this.jsPsych = jsPsych;
    }

    async trial(display_element, trial) {
      const api = trial.server.replace(/\/$/, "") + "/api/v1/rate/" + encodeURIComponent(trial.study);
      const screens = [];
      let token = null;
      const call = async (method, path, body) => {
        for (let attempt = 0; ; attempt++) {
          try {
            const response = await fetch(api + path, {
              method,
              headers: Object.assign(
                { "Content-Type": "application/json" },
                token ? { "X-Rater-Token": token } : {},
              ),
              body: body === undefined ? undefined : JSON.stringify(body),
            });
            if (response.status >= 500 || response.status === 429) throw new Error(String(response.status));
            const answer = await response.json();
            if (!response.ok) throw Object.assign(new Error(answer.detail), { final: true });
            return answer;
          } catch (failed) {
            // A lost connection or a busy server: the same request again (answers carry
            // their query id, so a retried one counts once).
            if (failed.final || attempt >= 20) throw failed;
            await new Promise((resolve) => setTimeout(resolve, Math.min(500 * 2 ** attempt, 5000)));
          }
        }
      };
      const show = (children) => {
        display_element.replaceChildren(element("div", { class: "closer-trial" }, children));
      };
      const finish = (state, error) => {
        display_element.replaceChildren();
        this.jsPsych.finishTrial({
          rater_token: token,
          answered: state ? state.answered : 0,
          complete: state ? Boolean(state.complete) : false,
          completion_code: state ? state.completion_code || null : null,
          step: state ? state.step : null,
          error: error || null,
          screens,
        });
      };

      let state;
      try {
        const joined = await call("POST", "/raters", trial.participant ? { participant: trial.participant } : {});
        token = joined.rater_token;
        state = await call("GET", "/next");
        while (state.comparison && ["task", "practice", "break"].includes(state.step)) {
          if (state.step === "break") await this.pause(show, state);
          this.preloadAhead(state, api);
          const started = performance.now();
          const answer = await this.ask(show, state, trial, api);
          screens.push(Object.assign({ query_id: state.comparison.query_id, format: state.comparison.format }, answer));
          const sent = Object.assign({ query_id: state.comparison.query_id, response_time_ms: Math.round(performance.now() - started) }, answer);
          state = await call("POST", "/answers", sent);
          if (state.feedback) await this.feedback(show, state.feedback);
        }
      } catch (failed) {
        finish(state, String(failed.message || failed));
        return;
      }
      finish(state, null);
    }

    /** The comparison likely next (state.upcoming: drawn as this one was served) is
     * fetched while this one is answered, so that the next screen shows whole at once. */
    preloadAhead(state, api) {
      const server = api.split("/api/v1/")[0];
      this.ahead = (state.upcoming || [])
        .filter((item) => item.image_url)
        .map((item) => {
          const image = new Image();
          image.src = server + item.image_url;
          return image;
        });
    }

    picture(item, api) {
      const server = api.split("/api/v1/")[0];
      const children = [];
      if (item.image_url) children.push(element("img", { src: server + item.image_url, alt: item.text || item.key }));
      if (item.text || !item.image_url) children.push(element("span", { text: item.text || item.key }));
      return children;
    }

    /** The participant's answer to the state's comparison: {choice}, {picks} or {sides}. */
    ask(show, state, trial, api) {
      const screen = state.comparison;
      const question = element("p", { class: "closer-question" });
      if (trial.question) question.innerHTML = trial.question;
      else question.textContent = this.question(screen);
      const progress = element("p", {
        class: "closer-progress",
        text: state.target ? `${state.answered + 1} of ${state.target}` : "",
      });
      return new Promise((resolve) => {
        const top = (item) => element("div", { class: "closer-reference" }, this.picture(item, api));
        if (screen.format === "triplet" || screen.anchor) {
          const choose = (side) => resolve({ choice: side });
          show([progress, question, top(screen.anchor),
            element("div", { class: "closer-choices" }, [
              element("button", { class: "jspsych-btn closer-item", "data-key": screen.left.key, on: () => choose("left") }, this.picture(screen.left, api)),
              element("button", { class: "jspsych-btn closer-item", "data-key": screen.right.key, on: () => choose("right") }, this.picture(screen.right, api)),
            ])]);
        } else if (screen.pivots) {
          // A sorting screen: each item with the left or the right pivot.
          const sides = {};
          const done = element("button", { class: "jspsych-btn closer-submit", text: "Done", disabled: "disabled" });
          const rows = screen.items.map((item) => {
            const mark = (side) => {
              sides[item.key] = side;
              row.dataset.side = side;
              if (Object.keys(sides).length === screen.items.length) done.removeAttribute("disabled");
            };
            const row = element("div", { class: "closer-sort-row", "data-key": item.key }, [
              element("button", { class: "jspsych-btn closer-left", text: "◀", "aria-label": "with the left one", on: () => mark("left") }),
              element("div", { class: "closer-item" }, this.picture(item, api)),
              element("button", { class: "jspsych-btn closer-right", text: "▶", "aria-label": "with the right one", on: () => mark("right") }),
            ]);
            return row;
          });
          done.addEventListener("click", () =>
            resolve({ sides: screen.items.map((item) => ({ key: item.key, side: sides[item.key] })) }));
          show([progress, question,
            element("div", { class: "closer-pivots" }, screen.pivots.map((pivot) => top(pivot))),
            ...rows, done]);
        } else {
          // Picks among items (odd one out, rank "k of n", and formats alike): in order.
          const picked = [];
          const buttons = screen.items.map((item, index) =>
            element("button", {
              class: "jspsych-btn closer-item",
              "data-key": item.key,
              "data-index": String(index),
              on: (event) => {
                const button = event.currentTarget;
                if (button.dataset.picked) return;
                picked.push(item.key);
                button.dataset.picked = String(picked.length);
                if (picked.length === (screen.picks || 1)) resolve({ picks: picked.slice() });
              },
            }, this.picture(item, api)));
          show([progress, question, ...(screen.reference ? [top(screen.reference)] : []),
            element("div", { class: "closer-choices" }, buttons)]);
        }
      });
    }

    question(screen) {
      if (screen.anchor) return "Which of the two is more like the one on top?";
      if (screen.pivots) return "Put each one with the one above it is more like.";
      if (screen.reference) return `Pick the ${screen.picks} most like the one on top, most alike first.`;
      return screen.picks > 1 ? `Pick ${screen.picks}.` : "Which one is the odd one out?";
    }

    pause(show, state) {
      return new Promise((resolve) => {
        const go = element("button", { class: "jspsych-btn", text: "Continue", disabled: "disabled", on: resolve });
        show([element("p", { class: "closer-break", text: `Block ${state.block - 1} of ${state.blocks} is done: take a break.` }), go]);
        setTimeout(() => go.removeAttribute("disabled"), 1000 * (state.break_seconds || 0));
      });
    }

    feedback(show, feedback) {
      return new Promise((resolve) => {
        show([element("p", { class: "closer-feedback", text: feedback.message }),
          element("button", { class: "jspsych-btn", text: "Next", on: resolve })]);
      });
    }
  }
  CloserPlugin.info = info;
  return CloserPlugin;
})(jsPsychModule);
