// evolve serve: one program's own page (/runs/RUN/programs/ID).
"use strict";

(async () => {
  const { el, getJSON, link, path, topBar } = evolve;
  const [, , runId, , programId] = path().split("/");
  document.getElementById("bar").replaceWith(topBar([["runs", link("/")], [`run ${runId}`, link(`/runs/${runId}`)],
    ["program", null]]));
  const box = document.getElementById("program");
  try {
    const [run, program] = await Promise.all([getJSON(link(`/api/runs/${runId}`)),
      getJSON(link(`/api/runs/${runId}/programs/${programId}`))]);
    document.title = `evolve: program ${runId}:${program.number}`; // RUN:N, as evolve show takes it
    document.querySelector("header.top > span:last-child").textContent = `program ${runId}:${program.number}`;
    box.replaceChildren(programView.render(program, { run, page: true }));
  } catch (error) {
    box.replaceChildren(el("p", { class: "error", text: error.message }));
  }
})();
