// The researcher's pages: copy buttons, and charts drawn with ECharts (from npm, served
// under /static/vendor) from the figures the server wrote into data- attributes. No
// inline script anywhere: the pages run under a strict Content-Security-Policy.
"use strict";

function copyButtons(root) {
  for (const button of root.querySelectorAll("button[data-copy]")) {
    if (button.dataset.ready) continue;
    button.dataset.ready = "1";
    button.addEventListener("click", async () => {
      const source = document.querySelector(button.dataset.copy);
      const text = source ? source.textContent.trim() : "";
      const label = button.textContent;
      try {
        await navigator.clipboard.writeText(text);
        button.textContent = "Copied";
      } catch {
        // Without clipboard access (plain HTTP on another host): select it for Ctrl+C.
        const range = document.createRange();
        range.selectNodeContents(source);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        button.textContent = "Selected: press Ctrl+C";
      }
      setTimeout(() => { button.textContent = label; }, 2000);
    });
  }
}

const prefersDark = window.matchMedia("(prefers-color-scheme: dark)");

function chartTheme() {
  return prefersDark.matches ? "dark" : null;
}

function hourLabel(iso) {
  const date = new Date(iso);
  return date.toISOString().slice(5, 13).replace("T", " ") + "h";
}

function drawCharts(root) {
  if (!window.echarts) return;
  for (const element of root.querySelectorAll("[data-chart]")) {
    const existing = window.echarts.getInstanceByDom(element);
    if (existing) existing.dispose();
    const chart = window.echarts.init(element, chartTheme(), { renderer: "canvas" });
    const kind = element.dataset.chart;
    let option;
    if (kind === "bars") {
      const x = JSON.parse(element.dataset.x || "[]");
      const y = JSON.parse(element.dataset.y || "[]");
      option = {
        grid: { left: 48, right: 16, top: 16, bottom: 40 },
        tooltip: { trigger: "axis" },
        xAxis: { type: "category", data: x.map(hourLabel), axisLabel: { hideOverlap: true } },
        yAxis: { type: "value", minInterval: 1 },
        series: [{ type: "bar", name: element.dataset.name || "", data: y, itemStyle: { color: "#2457c5" } }],
      };
    } else {
      // One line per metric, one point per model version: (answers used, value).
      const series = JSON.parse(element.dataset.series || "[]");
      option = {
        grid: { left: 48, right: 16, top: 36, bottom: 44 },
        // One scrolling row: a legend that wraps on a phone would run into the plot.
        legend: { top: 0, type: "scroll" },
        tooltip: { trigger: "axis", valueFormatter: (value) => (typeof value === "number" ? value.toFixed(3) : value) },
        xAxis: { type: "value", name: element.dataset.xName || "", nameLocation: "middle", nameGap: 28, scale: true },
        yAxis: { type: "value", min: 0, max: 1 },
        series: series.map((line) => ({ type: "line", name: line.name, data: line.points, symbolSize: 8 })),
      };
    }
    option.backgroundColor = "transparent";
    option.animation = false;
    chart.setOption(option);
    element.dataset.drawn = "1";
  }
}

function enhance(root) {
  copyButtons(root);
  drawCharts(root);
  uploadForms(root);
}

// A form that undoes something a researcher cannot take back (revoking a token, deleting)
// asks first: its data-confirm is the question. Declined, the submit stops here, before
// it reaches the form: htmx sends a form's request whether or not the default is prevented.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset ? event.target.dataset.confirm : undefined;
  if (question && !window.confirm(question)) {
    event.preventDefault();
    event.stopPropagation();
  }
}, true);
document.addEventListener("DOMContentLoaded", () => enhance(document));
document.addEventListener("htmx:afterSettle", (event) => enhance(event.target));
window.addEventListener("resize", () => {
  if (!window.echarts) return;
  for (const element of document.querySelectorAll("[data-chart]")) {
    const chart = window.echarts.getInstanceByDom(element);
    if (chart) chart.resize();
  }
});
prefersDark.addEventListener("change", () => drawCharts(document));

// Uploads: the file goes up with a progress bar; the server's verdict (stored, or each
// problem with its file, row and column) is a fragment it renders, swapped in as is.
function idempotencyKey() {
  if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
  return `${Date.now()}-${Math.random().toString(36).slice(2)}`;
}

function csrfToken() {
  try {
    return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRF-Token"] || "";
  } catch {
    return "";
  }
}

function uploadForms(root) {
  for (const form of root.querySelectorAll("form[data-upload]")) {
    if (form.dataset.ready) continue;
    form.dataset.ready = "1";
    const input = form.querySelector("input[type=file]");
    // One key per chosen file: sending it again (a dropped connection) stores it once.
    let key = idempotencyKey();
    input.addEventListener("change", () => { key = idempotencyKey(); });
    form.addEventListener("submit", (event) => {
      if (!input.files.length) return;
      event.preventDefault();
      const button = form.querySelector("button[type=submit]");
      const box = form.querySelector(".upload-progress");
      const bar = box.querySelector("progress");
      const status = box.querySelector(".upload-status");
      const result = form.querySelector(".upload-result");
      const file = input.files[0];
      const request = new XMLHttpRequest();
      request.open("POST", form.action);
      request.setRequestHeader("X-CSRF-Token", csrfToken());
      request.setRequestHeader("X-Closer-Partial", "1");
      request.setRequestHeader("Idempotency-Key", key);
      request.upload.addEventListener("progress", (progress) => {
        if (!progress.lengthComputable) return;
        bar.value = Math.round((100 * progress.loaded) / progress.total);
        status.textContent = `${(progress.loaded / 1048576).toFixed(1)} of ${(progress.total / 1048576).toFixed(1)} MB sent`;
      });
      request.upload.addEventListener("load", () => {
        bar.removeAttribute("value"); // the server checks and stores: no figure to show
        status.textContent = "Checking and storing…";
      });
      request.addEventListener("load", () => {
        box.hidden = true;
        button.disabled = false;
        const type = request.getResponseHeader("Content-Type") || "";
        if (type.startsWith("text/html")) {
          result.innerHTML = request.responseText; // rendered (and escaped) by the server
        } else {
          let detail = request.statusText;
          try { detail = JSON.parse(request.responseText).detail; } catch { /* not JSON */ }
          const message = document.createElement("p");
          message.className = "error";
          message.setAttribute("role", "alert");
          message.textContent = `${file.name} was not stored: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`;
          result.replaceChildren(message);
        }
        if (request.status < 300 && window.htmx) {
          htmx.ajax("GET", location.pathname, { target: "#recent-uploads", select: "#recent-uploads", swap: "outerHTML" });
        }
      });
      request.addEventListener("error", () => {
        box.hidden = true;
        button.disabled = false;
        const message = document.createElement("p");
        message.className = "error";
        message.setAttribute("role", "alert");
        message.textContent = "The connection broke off: upload again (it is stored once).";
        result.replaceChildren(message);
      });
      result.replaceChildren();
      bar.value = 0;
      status.textContent = "Starting…";
      box.hidden = false;
      button.disabled = true;
      const body = new FormData();
      body.append("file", file);
      const skip = form.querySelector("input[name=on_error]");
      if (skip && skip.checked) body.append("on_error", "skip");
      const split = form.querySelector("input[name=split]");
      if (split && split.checked) body.append("split", "test");
      request.send(body);
    });
  }
}

// Live parts poll while the page is in view; a tab in the background asks nothing.
document.addEventListener("htmx:beforeRequest", (event) => {
  const trigger = event.detail.elt.getAttribute("hx-trigger") || "";
  if (document.hidden && trigger.startsWith("every")) event.preventDefault();
});
