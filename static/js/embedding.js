// The embedding page: every item of a t-ETE (or DisDF) model as a point, coloured by
// label, drawn on a canvas by ECharts in its "large" mode so 10,000 points stay quick.
// Item texts, keys and labels are uploaded by people: they only ever enter the page as
// textContent or an <img> src, never as HTML.
"use strict";

(() => {
  const root = document.getElementById("embedding");
  if (!root || !window.echarts) return;
  const status = document.getElementById("embedding-status");
  const card = document.getElementById("item-card");
  const axisX = document.getElementById("axis-x");
  const axisY = document.getElementById("axis-y");
  const started = performance.now();
  let keys = [];
  let coordinates = [];
  let cards = {};
  let chart = null;
  let shownItems = [];
  const palette = ["#2457c5", "#e8743b", "#19a979", "#ed4a7b", "#945ecf", "#13a4b4",
    "#525df4", "#bf399e", "#6c8893", "#ee6868", "#2f6497", "#b7950b"];

  function element(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function describe(index, extra) {
    const key = keys[index];
    const [label, text, file, kind] = cards[key] || [null, null, null, null];
    const parts = [];
    if (file && (kind === "audio" || kind === "video")) {
      // A sound or video plays in the card (the browser's own controls).
      const player = element(kind);
      player.src = file;
      player.controls = true;
      player.preload = "metadata";
      player.setAttribute("aria-label", text || key);
      parts.push(player);
    } else if (file) {
      const img = element("img");
      img.src = file;
      img.alt = text || key;
      parts.push(img);
    }
    parts.push(element("p", key, "key"));
    if (label !== null) parts.push(element("p", `label: ${label}`, "label"));
    if (text) parts.push(element("p", text, "text"));
    if (extra) parts.push(extra);
    card.replaceChildren(...parts);
  }

  function draw() {
    const dx = Number(axisX.value);
    const dy = Number(axisY.value);
    const groups = new Map();
    keys.forEach((key, index) => {
      const label = (cards[key] || [null])[0];
      const name = label === null || label === undefined ? "no label" : String(label);
      if (!groups.has(name)) groups.set(name, []);
      groups.get(name).push([coordinates[index][dx], coordinates[index][dy], index]);
    });
    const names = [...groups.keys()].sort();
    // Each point's item, by series and position: in ECharts' large mode (a series of
    // 2,000 points or more) hover and click events carry the data index only.
    shownItems = names.map((name) => groups.get(name).map((point) => point[2]));
    const many = names.length > palette.length;
    const series = names.map((name, i) => ({
      type: "scatter",
      name,
      data: groups.get(name),
      large: true,
      largeThreshold: 2000,
      symbolSize: keys.length > 3000 ? 4 : 7,
      itemStyle: { color: many ? undefined : palette[i % palette.length], opacity: 0.8 },
      emphasis: { focus: "none" },
    }));
    const option = {
      backgroundColor: "transparent",
      animation: false,
      grid: { left: 40, right: 16, top: names.length > 1 ? 40 : 16, bottom: 32 },
      legend: names.length > 1 && names.length <= 40 ? { top: 0, type: "scroll" } : undefined,
      tooltip: { show: false }, // the card beside the chart shows the item (as text)
      xAxis: { type: "value", scale: true, splitLine: { show: false } },
      yAxis: { type: "value", scale: true, splitLine: { show: false } },
      dataZoom: [{ type: "inside", xAxisIndex: 0 }, { type: "inside", yAxisIndex: 0 }],
      series,
    };
    chart.setOption(option, true);
  }

  async function neighbours(index) {
    const url = new URL(root.dataset.neighborsUrl, location.href);
    url.searchParams.set("item", keys[index]);
    url.searchParams.set("k", "8");
    const list = element("ol", null, "neighbours");
    describe(index, list);
    list.before(element("p", "Nearest neighbours:", "hint"));
    const response = await fetch(url, { credentials: "same-origin" });
    if (!response.ok) {
      list.replaceChildren(element("li", "Could not load the neighbours."));
      return;
    }
    const found = await response.json();
    // Each neighbour as its thumbnail (if it has one) and key, a link to it on the items page.
    list.replaceChildren(...found.neighbors.map((neighbour) => {
      const [label, text, file, kind] = cards[neighbour.key] || [null, null, null, null];
      const image = kind === "image" ? file : null;
      const link = element("a");
      const target = new URL(root.dataset.itemsUrl, location.href);
      target.searchParams.set("key", neighbour.key);
      link.href = target.pathname + target.search;
      if (image) {
        const img = element("img", null, "thumb");
        img.src = image;
        img.alt = text || neighbour.key;
        img.loading = "lazy";
        link.append(img);
      }
      link.append(element("span", `${neighbour.key}${label !== null && label !== undefined ? ` (${label})` : ""}`));
      const item = element("li");
      item.append(link, element("span", ` · ${neighbour.distance.toFixed(3)}`, "hint"));
      return item;
    }));
  }

  async function load() {
    const [embedding, items] = await Promise.all([
      fetch(root.dataset.embeddingUrl, { credentials: "same-origin" }),
      fetch(root.dataset.cardsUrl, { credentials: "same-origin" }),
    ]);
    if (!embedding.ok || !items.ok) {
      status.textContent = "The embedding could not be loaded: reload the page.";
      return;
    }
    const body = await embedding.json();
    cards = await items.json();
    keys = body.keys;
    coordinates = body.coordinates;
    const dimensions = coordinates.length ? coordinates[0].length : 0;
    for (const select of [axisX, axisY]) {
      select.replaceChildren(...Array.from({ length: dimensions }, (_, d) => {
        const option = element("option", `dimension ${d + 1}`);
        option.value = String(d);
        return option;
      }));
    }
    axisY.value = dimensions > 1 ? "1" : "0";
    chart = window.echarts.init(document.getElementById("scatter"),
      window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : null);
    chart.on("finished", () => {
      if (root.dataset.drawnMs) return;
      root.dataset.drawnMs = String(Math.round(performance.now() - started));
      status.textContent = `${keys.length.toLocaleString()} items`;
    });
    const itemOf = (event) => (shownItems[event.seriesIndex] || [])[event.dataIndex];
    // A large-mode series is one shape: moving from point to point inside it is a
    // mousemove, not a new mouseover.
    let hovered;
    const follow = (event) => {
      const index = itemOf(event);
      if (index === undefined || index === hovered) return;
      hovered = index;
      describe(index);
    };
    chart.on("mouseover", follow);
    chart.on("mousemove", follow);
    chart.on("click", (event) => {
      const index = itemOf(event);
      if (index !== undefined) neighbours(index);
    });
    draw();
    for (const select of [axisX, axisY]) select.addEventListener("change", draw);
    window.addEventListener("resize", () => chart.resize());
  }

  load();
})();
