// evolve serve: the runs and experiments of the store, refreshed every few seconds.
"use strict";

(() => {
  const { BASE, el, getJSON, link, num, statusBadge, topBar } = evolve;
  const REFRESH_MS = 4000;

  function runsTable(runs) {
    if (!runs.length) return el("p", { class: "empty", text: "no runs in this store yet" });
    const head = ["run", "problem", "policy", "seed", "status", "iterations", "programs", "best", "solved", "experiment",
      "name"];
    const rows = runs.map((run) => el("tr", { "data-run": run.id },
      el("td", {}, el("a", { href: link(`/runs/${run.id}`), text: `run ${run.id}` })),
      el("td", { text: run.problem }), el("td", { text: run.policy }), el("td", { class: "num", text: run.seed }),
      el("td", {}, statusBadge(run.status)),
      el("td", { class: "num", text: `${run.iterations_done}/${run.iterations_target}` }),
      el("td", { class: "num", text: run.programs }), el("td", { class: "num", text: num(run.best) }),
      el("td", { class: "solved", text: run.solved_programs ? `yes (${run.solved_programs})` : "no",
        title: "programs that solve the problem" }),
      el("td", {}, run.experiment ? el("a", { href: link(`/experiments/${encodeURIComponent(run.experiment)}/report`),
        text: run.experiment }) : ""),
      el("td", { class: "muted", text: run.name })));
    return el("table", { class: "list", id: "runs-table" },
      el("thead", {}, el("tr", {}, head.map((h) => el("th", { text: h })))), el("tbody", {}, rows));
  }

  function experimentsTable(experiments) {
    if (!experiments.length) return el("p", { class: "empty", text: "no experiments in this store" });
    const rows = experiments.map((e) => el("tr", {},
      el("td", {}, el("a", { href: link(`/experiments/${encodeURIComponent(e.name)}/report`), text: e.name })),
      el("td", { text: e.description }),
      el("td", { text: `${e.problems.length} problems × ${e.policies.length} policies × ${e.seeds.length} seeds` }),
      el("td", {}, e.cells.map((c, i) => [i ? " " : "", el("a", { href: link(`/runs/${c.run}`),
        title: `${c.problem} / ${c.policy} / seed ${c.seed}`, text: `run ${c.run}` })]))));
    return el("table", { class: "list" },
      el("thead", {}, el("tr", {}, ["experiment (report)", "description", "cells", "runs"].map((h) =>
        el("th", { text: h })))), el("tbody", {}, rows));
  }

  // the stores this server serves (the config's, the experiments', each --db): one link each, this one marked
  function picker(stores) {
    if (stores.length < 2) return "";
    return el("p", { class: "stores", id: "store-picker" }, "stores: ", stores.map((store, i) => [i ? " · " : "",
      store.base === BASE ? el("b", { text: store.label, title: store.db })
        : el("a", { href: `${store.base}/`, text: store.label, title: store.db })]));
  }

  async function refresh() {
    try {
      const [runs, experiments, stores] = await Promise.all([getJSON(link("/api/runs")),
        getJSON(link("/api/experiments")), getJSON("/api/stores")]);
      document.getElementById("where").textContent = `store: ${runs.db} (read-only)`;
      document.getElementById("stores").replaceChildren(picker(stores.stores));
      document.getElementById("runs").replaceChildren(runsTable(runs.runs));
      document.getElementById("experiments").replaceChildren(experimentsTable(experiments.experiments));
    } catch (error) {
      document.getElementById("runs").replaceChildren(el("p", { class: "error", text: `cannot read: ${error.message}` }));
    }
  }

  document.getElementById("bar").replaceWith(topBar([["runs", link("/")]]));
  refresh();
  setInterval(refresh, REFRESH_MS);
})();
