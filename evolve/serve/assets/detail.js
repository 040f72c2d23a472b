// evolve serve: one program shown whole: header, links, score vector against its parent, feedback, the diff
// against its parent (made on the server), the code, and the answer, prompt and completion that made it.
"use strict";

const programView = (() => {
  const { el, link, num } = evolve;

  function diffBlock(diff) {
    const classes = [["+++", "meta"], ["---", "meta"], ["@@", "hunk"], ["+", "add"], ["-", "del"]];
    const lines = diff.split("\n").map((line) => {
      const found = classes.find(([prefix]) => line.startsWith(prefix));
      return el("span", { class: found ? found[1] : null, text: line || " " });
    });
    return el("pre", { class: "diff", id: "program-diff" }, lines);
  }

  function scoresTable(program) {
    const before = program.parent_scores || {};
    const rows = Object.entries(program.scores).map(([name, value]) => {
      const old = before[name];
      const change = old === undefined ? "" : value > old + 1e-12 ? "up" : value < old - 1e-12 ? "down" : "";
      return el("tr", {}, el("td", { text: name }), el("td", { class: "num", text: old === undefined ? "" : num(old) }),
        el("td", { class: `num ${change}`, text: num(value) }),
        el("td", { class: `num ${change}`, text: change ? (value - old > 0 ? "+" : "") + num(value - old, 3) : "" }));
    });
    return el("div", { class: "scores" }, el("table", {},
      el("thead", {}, el("tr", {}, ["objective", "parent", "this", "change"].map((h) => el("th", { text: h })))),
      el("tbody", {}, rows)));
  }

  function section(title, body, open) {
    return el("details", { open: open ? "" : null }, el("summary", { text: title }), body);
  }

  // options: select(id) to move the selection (the run page), run: the run's header (for the report link),
  // page: shown on the program's own page (code and completion open), children: ids the run page knows,
  // label(id): a child's RUN:N (a program is named RUN:N everywhere, as evolve show takes it; its store id aside)
  function render(program, options = {}) {
    const parentLabel = `${program.run}:${program.parent_number}`;
    const label = options.label || ((id) => `store id ${id}`);
    const who = program.policy ? `by ${program.policy}` : "seed program";
    const title = el("h2", { title: "RUN:N, as evolve show and evolve lineage take it" },
      `${program.run}:${program.number}`, el("span", { class: "muted", text:
      ` (store id ${program.id}) · iteration ${program.iteration} · island ${program.island} · ${who}` }),
    program.solved ? [" ", el("span", { class: "badge solved-badge", text: "solved" })] : null);
    const links = el("div", { class: "links" },
      options.page ? null : el("a", { href: link(`/runs/${program.run}/programs/${program.id}`),
        id: "program-page-link", text: "program page" }),
      el("a", { href: link(`/runs/${program.run}/lineage/${program.id}`), id: "lineage-link",
        text: "lineage from the seed" }));
    if (program.parent !== null) {
      links.append(options.select
        ? el("button", { onclick: () => options.select(program.parent), text: `parent ${parentLabel}` })
        : el("a", { href: link(`/runs/${program.run}/programs/${program.parent}`), text: `parent ${parentLabel}` }));
    }
    if (options.run && options.run.experiment) {
      links.append(el("a", { href: link(`/experiments/${encodeURIComponent(options.run.experiment)}/report`),
        id: "report-link", text: `experiment report (${options.run.experiment})` }));
    }
    const delta = program.parent_scalar === null ? "" : ` (parent ${num(program.parent_scalar)}, ` +
      `${program.scalar - program.parent_scalar >= 0 ? "+" : ""}${num(program.scalar - program.parent_scalar, 3)})`;
    const parts = [title, links, el("div", {}, el("b", { text: "scalar " }), num(program.scalar), el("span", {
      class: "muted", text: delta })), el("h3", { text: `score vector (${Object.keys(program.scores).length} objectives)` }),
    scoresTable(program)];
    const artifacts = Object.entries(program.artifacts || {});
    if (artifacts.length) {
      // the evaluator's "feedback" sits under the heading itself; any other artifact is named above its text
      parts.push(el("h3", { text: "feedback" }), ...artifacts.map(([key, value]) => el("div", { class: "artifact" },
        key === "feedback" ? null : el("div", { class: "muted", text: key }), el("pre", { class: "block", text: value }))));
    }
    if (program.parent !== null) {
      parts.push(el("h3", { text: `diff against parent ${parentLabel}` }),
        program.diff ? diffBlock(program.diff) : el("p", { class: "empty", text: "no change in the code" }));
    }
    parts.push(section("code", el("pre", { id: "program-code", text: program.code }),
      program.parent === null || options.page));
    if (program.edit) parts.push(section("the answer that made it", el("pre", { text: program.edit })));
    if (program.prompt !== null) {
      const call = program.call;
      parts.push(section(`prompt (${call.prompt_tokens} tokens)`, el("pre", { id: "program-prompt", text: program.prompt })),
        section(`completion (${call.completion_tokens} tokens, ${num(call.latency_s, 3)} s)`,
          el("pre", { id: "program-completion", text: program.completion || "" }), options.page));
    } else if (program.parent !== null) {
      parts.push(el("p", { class: "empty", text: "no policy call stored for this program" }));
    }
    const children = options.children || [];
    if (children.length) {
      parts.push(el("div", { class: "muted", id: "children" }, `children: `, children.map((id, i) => [i ? ", " : "",
        el("button", { class: "link", onclick: () => options.select(id), text: label(id) })])));
    }
    return el("div", { class: "detail", "data-program": program.id }, parts);
  }

  return { render };
})();
