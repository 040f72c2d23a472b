// evolve serve: the run page. Polls /api/runs/RUN/tree?since=LAST and adds only the programs it has not seen to
// the tree (tree_view.js draws it); the header counts the run; a click shows the program in the side panel.
"use strict";

(() => {
  const { el, getJSON, link, num, path, statusBadge, topBar } = evolve;
  const POLL_MS = 1500;
  const runId = Number(path().split("/")[2]);
  let last = 0, run = null, selected = null, loaded = false; // loaded: the stored backlog is drawn
  const chain = []; // the edges from the selected program up to the seed, highlighted

  const view = treeView.create(document.getElementById("tree-box"), { select, hover });
  const { nodes } = view;

  function hover(node) {
    document.getElementById("hover").textContent = node === null ? "" : `${label(node.id)} (store id ${node.id}) · ` +
      `generation ${node.depth} · iteration ${node.iteration} · island ${node.island} · scalar ${num(node.scalar)}` +
      (node.solved ? " · solved" : "") + (node.parent === null ? " · the seed" : ` · parent ${label(node.parent)}`) +
      ` · ${(view.kids.get(node.id) || []).length} children`;
  }

  function label(id) { // RUN:N, as evolve show takes it; N counts the run's programs in store order, as the tree
    const node = nodes.get(id);
    return node ? `${runId}:${node.number}` : `store id ${id}`;
  }

  function legend() {
    const [lo, hi] = view.range();
    document.getElementById("legend").replaceChildren(
      el("span", { text: `scalar ${num(lo === Infinity ? null : lo)}` }), el("span", { class: "ramp" }),
      el("span", { text: num(hi === -Infinity ? null : hi) }), el("span", { class: "ring" }), el("span", { text: "solved" }),
      el("span", { class: "muted", text: "· wheel or +/− zoom, drag pans · hover: parent and children · click: details" }));
  }

  function tools() {
    const rows = el("select", { id: "tree-rows", title: "what a row of the tree is" },
      el("option", { value: "generation", text: "rows: generation" }),
      el("option", { value: "iteration", text: "rows: iteration" }));
    rows.addEventListener("change", () => view.setRows(rows.value));
    document.getElementById("tree-tools").replaceChildren(
      el("button", { id: "tree-fit", title: "the whole tree in the pane", onclick: () => view.fit(), text: "fit" }),
      el("button", { id: "zoom-in", title: "zoom in", onclick: () => view.zoomCentre(1.5), text: "+" }),
      el("button", { id: "zoom-out", title: "zoom out", onclick: () => view.zoomCentre(1 / 1.5), text: "−" }), rows);
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
        class: "link", id: "best-link", title: `select the best program, ${run.id}:${run.best_number}`,
        onclick: () => select(run.best_id) }, el("b", { text: num(run.best) }), ` (${run.id}:${run.best_number})`)),
      el("span", { class: "fact" }, "solved ", el("b", { id: "solved", text: run.solved_programs
        ? `${run.solved_programs} program${run.solved_programs === 1 ? "" : "s"}` : "no" })),
      Object.keys(run.failed || {}).length ? el("span", { class: "fact muted", id: "failed", title:
        "answers that gave no program, by kind" }, "no program: " + Object.entries(run.failed).map(([kind, count]) =>
        `${kind.replace("_", " ")} ${count}`).join(" · ")) : null,
      run.stop_reason ? el("span", { class: "fact", id: "stop-reason", title: "why the run stopped, as it stored" },
        "stopped: ", el("b", { text: run.stop_reason })) : null,
      run.experiment ? el("a", { href: link(`/experiments/${encodeURIComponent(run.experiment)}/report`),
        id: "run-report-link", text: `experiment report (${run.experiment})` }) : null,
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
      view.edges.append(node.edge); // drawn last: on top
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
      const program = await getJSON(link(`/api/runs/${runId}/programs/${id}`));
      if (selected !== id) return;
      panel.replaceChildren(programView.render(program, { run, select, label, children: view.kids.get(id) || [] }));
    } catch (error) {
      panel.replaceChildren(el("p", { class: "error", text: error.message }));
    }
  }

  async function poll() {
    let more = false;
    try {
      const page = await getJSON(link(`/api/runs/${runId}/tree?since=${last}`));
      run = page.run;
      view.add(page.nodes, loaded); // live arrivals fade in, the stored backlog does not
      last = page.last;
      more = page.more;
      loaded = loaded || !more;
      view.hide(more); // a long backlog is kept out of rendering and laid out once, at its end
      if (!more && (page.nodes.length || !view.svg.hasAttribute("data-drawn"))) {
        legend();
        view.layout();
        view.svg.setAttribute("data-drawn", nodes.size);
      }
      header();
      document.title = `evolve: run ${run.id} (${run.status})`;
    } catch (error) { // the run vanished or the store cannot be read: say so in place of the panels
      document.querySelector("main").replaceChildren(el("p", { class: "error", id: "run-error", text: error.message }));
      return;
    }
    if (more) setTimeout(poll, 0);
    else if (run.status === "running") setTimeout(poll, POLL_MS);
    // else the run ended: what it stored is all drawn
  }

  document.getElementById("bar").replaceWith(topBar([["runs", link("/")], [`run ${runId}`, null]]));
  tools();
  poll();
})();
