// evolve serve: a run's program tree, drawn as SVG and grown live. Each island is a lane, each program a dot at
// its iteration (x), parent -> child edges, colour by scalar (viridis over the run's range), solved programs ringed
// in red. It polls /api/runs/RUN/tree?since=LAST and adds only the programs it has not seen.
"use strict";

(() => {
  const { el, getJSON, num, colour, statusBadge, topBar } = evolve;
  const SVG = "http://www.w3.org/2000/svg";
  const POLL_MS = 1500;
  const SLOT = 14; // vertical distance between programs of one island and iteration
  const LEFT = 80, TOP = 8, BOTTOM = 26, RIGHT = 16;
  const runId = Number(location.pathname.split("/")[2]);

  const nodes = new Map(); // id -> {id, parent, island, iteration, scalar, solved, number, slot, dot, edge}
  const slots = new Map(); // "island:iteration" -> programs there so far
  let last = 0, run = null, selected = null, lo = Infinity, hi = -Infinity;
  let topIsland = 0, topIteration = 0, depth = 3; // running maxima (no Math.max over 100,000 arguments)
  let pending = false; // programs added since the last layout
  const chain = []; // the edges from the selected program up to the seed, highlighted
  let loaded = false; // the stored backlog is drawn: later programs are arrivals

  const svg = document.createElementNS(SVG, "svg");
  const lanes = document.createElementNS(SVG, "g");
  const edges = document.createElementNS(SVG, "g");
  const dots = document.createElementNS(SVG, "g");
  svg.append(lanes, edges, dots);
  svg.setAttribute("id", "tree-svg");
  document.getElementById("tree").append(svg);

  function svgEl(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    return node;
  }

  function add(node, fresh, dotsOut, edgesOut) {
    const key = `${node.island}:${node.iteration}`;
    node.slot = slots.get(key) || 0;
    slots.set(key, node.slot + 1);
    depth = Math.max(depth, node.slot + 1);
    topIsland = Math.max(topIsland, node.island);
    topIteration = Math.max(topIteration, node.iteration);
    node.number = nodes.size + 1;
    node.dot = svgEl("circle", { class: "node" + (fresh ? " fresh" : "") + (node.solved ? " solved" : ""),
      "data-id": node.id, "data-island": node.island });
    dotsOut.append(node.dot);
    if (node.parent !== null) {
      node.edge = svgEl("path", { class: "edge", "data-child": node.id });
      edgesOut.append(node.edge);
    }
    nodes.set(node.id, node);
    lo = Math.min(lo, node.scalar);
    hi = Math.max(hi, node.scalar);
  }

  function layout() {
    const islands = Math.max(run ? run.islands : 1, topIsland + 1);
    const iterations = Math.max(run ? run.iterations_target : 1, topIteration);
    const width = Math.max(document.getElementById("tree-box").clientWidth - 4, 480);
    // long runs are drawn denser (down to 2 px per iteration, smaller dots), then scroll sideways
    const step = Math.max(2, (width - LEFT - RIGHT) / Math.max(1, iterations));
    const radius = Math.min(4.5, Math.max(1.5, step * 0.4));
    const slot = Math.min(SLOT, Math.max(4, radius * 3));
    const laneHeight = 12 + depth * slot;
    const fullWidth = LEFT + RIGHT + step * Math.max(1, iterations);
    const height = TOP + islands * laneHeight + BOTTOM;
    svg.setAttribute("width", fullWidth);
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", `0 0 ${fullWidth} ${height}`);
    lanes.replaceChildren();
    for (let i = 0; i < islands; i++) {
      lanes.append(svgEl("rect", { class: "lane" + (i % 2 ? " odd" : ""), x: 0, y: TOP + i * laneHeight,
        width: fullWidth, height: laneHeight }));
      const label = svgEl("text", { class: "lane-label", x: 6, y: TOP + i * laneHeight + 14 });
      label.textContent = `island ${i}`;
      lanes.append(label);
    }
    const every = Math.max(1, Math.ceil(40 / step));
    for (let t = 0; t <= iterations; t += every) {
      const tick = svgEl("text", { class: "tick", x: LEFT + t * step, y: height - 8, "text-anchor": "middle" });
      tick.textContent = t;
      lanes.append(tick);
    }
    const axis = svgEl("text", { class: "tick", x: 6, y: height - 8 });
    axis.textContent = "iteration →";
    lanes.append(axis);
    const span = hi - lo;
    for (const node of nodes.values()) {
      node.x = LEFT + node.iteration * step;
      node.y = TOP + node.island * laneHeight + 12 + node.slot * slot;
      node.dot.setAttribute("r", node.solved ? radius + 1.5 : radius);
      node.dot.setAttribute("cx", node.x);
      node.dot.setAttribute("cy", node.y);
      node.dot.setAttribute("fill", colour(span > 0 ? (node.scalar - lo) / span : 1));
    }
    for (const node of nodes.values()) {
      const parent = nodes.get(node.parent);
      if (!node.edge || !parent) continue;
      const mid = (parent.x + node.x) / 2;
      node.edge.setAttribute("d", `M${parent.x},${parent.y} C${mid},${parent.y} ${mid},${node.y} ${node.x},${node.y}`);
    }
    legend();
  }

  function legend() {
    const box = document.getElementById("legend");
    box.replaceChildren(el("span", { text: `scalar ${num(lo === Infinity ? null : lo)}` }),
      el("span", { class: "ramp" }), el("span", { text: num(hi === -Infinity ? null : hi) }),
      el("span", { class: "ring" }), el("span", { text: "solved" }),
      el("span", { text: "· lanes: islands · edges: parent → child · click a dot" }),
      el("span", { id: "hover", class: "hover" }));
  }

  function header() {
    const head = document.getElementById("run-head");
    const live = run.status === "running";
    head.replaceChildren(...[ // replaceChildren would write a null as the text "null"
      el("h1", { id: "run-title", text: `run ${run.id}: ${run.problem}` }),
      statusBadge(run.status),
      el("span", { class: "fact" }, "policy ", el("b", { text: run.policy }), ` · seed ${run.seed}`),
      el("span", { class: "fact" }, "iterations ", el("b", { id: "iterations", text:
        `${run.iterations_done}/${run.iterations_target}` })),
      el("span", { class: "fact" }, "programs ", el("b", { id: "program-count", text: nodes.size })),
      el("span", { class: "fact" }, "best ", run.best_id === null ? el("b", { text: "-" }) : el("button", {
        class: "link", id: "best-link", title: `select the best program, #${run.best_id}`,
        onclick: () => select(run.best_id) }, el("b", { text: num(run.best) }), ` (#${run.best_id})`)),
      run.solved_programs ? el("span", { class: "fact" }, "solved ", el("b", { text: run.solved_programs })) : null,
      Object.keys(run.failed || {}).length ? el("span", { class: "fact muted", id: "failed", title:
        "answers that gave no program, by kind" }, "no program: " + Object.entries(run.failed).map(([kind, count]) =>
        `${kind.replace("_", " ")} ${count}`).join(" · ")) : null,
      run.experiment ? el("a", { href: `/experiments/${encodeURIComponent(run.experiment)}/report`, id: "run-report-link",
        text: `experiment report (${run.experiment})` }) : null,
      el("span", { id: "live", class: live ? "on muted" : "muted", text: !loaded
        ? `loading the stored programs: ${nodes.size} so far…` : live
          ? `live, updated ${new Date().toLocaleTimeString()}` : `not running (${run.status})` })].filter(Boolean));
  }

  function highlightChain(id) {
    for (const edge of chain) edge.classList.remove("chain");
    chain.length = 0;
    let node = nodes.get(id), guard = 0;
    while (node && node.edge && guard++ < nodes.size) {
      node.edge.classList.add("chain");
      chain.push(node.edge);
      edges.append(node.edge); // drawn last: on top
      node = nodes.get(node.parent);
    }
  }

  async function select(id) {
    if (selected !== null && nodes.has(selected)) nodes.get(selected).dot.classList.remove("selected");
    selected = id;
    if (nodes.has(id)) nodes.get(id).dot.classList.add("selected");
    highlightChain(id);
    const panel = document.getElementById("detail");
    try {
      const program = await getJSON(`/api/runs/${runId}/programs/${id}`);
      if (selected !== id) return;
      const children = [];
      for (const node of nodes.values()) if (node.parent === id) children.push(node.id);
      panel.replaceChildren(programView.render(program, { run, select, children }));
    } catch (error) {
      panel.replaceChildren(el("p", { class: "error", text: error.message }));
    }
  }

  async function poll() {
    let more = false;
    try {
      const page = await getJSON(`/api/runs/${runId}/tree?since=${last}`);
      run = page.run;
      const fresh = loaded, dotsOut = document.createDocumentFragment(); // animate live arrivals only
      const edgesOut = document.createDocumentFragment(); // one insertion per page, not one per program
      for (const node of page.nodes) if (!nodes.has(node.id)) add(node, fresh, dotsOut, edgesOut);
      dots.append(dotsOut);
      edges.append(edgesOut);
      pending = pending || page.nodes.length > 0;
      last = page.last;
      more = page.more;
      loaded = loaded || !more;
      // a long backlog is kept out of rendering (display: none) and laid out once, at its end
      svg.style.display = more ? "none" : "";
      if ((pending && !more) || !svg.getAttribute("width")) {
        layout();
        pending = false;
      }
      header();
      document.title = `evolve: run ${run.id} (${run.status})`;
    } catch (error) {
      document.getElementById("run-head").replaceChildren(el("p", { class: "error", text: error.message }));
      return; // an unknown run: nothing to poll
    }
    if (more) setTimeout(poll, 0);
    else if (run.status === "running") setTimeout(poll, POLL_MS);
    // else the run ended: what it stored is all drawn
  }

  // one listener for every dot: a click selects it, hovering names it (no title element per program)
  dots.addEventListener("click", (event) => {
    const id = Number(event.target.getAttribute("data-id"));
    if (nodes.has(id)) select(id);
  });
  dots.addEventListener("mouseover", (event) => {
    const node = nodes.get(Number(event.target.getAttribute("data-id")));
    if (!node) return;
    document.getElementById("hover").textContent = `#${node.id} (program ${node.number}) · iteration ` +
      `${node.iteration} · island ${node.island} · scalar ${num(node.scalar)}` + (node.solved ? " · solved" : "");
  });

  document.getElementById("bar").replaceWith(topBar([["runs", "/"], [`run ${runId}`, null]]));
  window.addEventListener("resize", () => { if (nodes.size) layout(); });
  poll();
})();
