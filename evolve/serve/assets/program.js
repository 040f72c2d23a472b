// evolve serve: one program's own page (/runs/RUN/programs/ID).
"use strict";

(async () => {
  const { el, getJSON, topBar } = evolve;
  const [, , runId, , programId] = location.pathname.split("/");
  document.getElementById("bar").replaceWith(topBar([["runs", "/"], [`run ${runId}`, `/runs/${runId}`],
    [`program #${programId}`, null]]));
  const box = document.getElementById("program");
  try {
    const [run, program] = await Promise.all([getJSON(`/api/runs/${runId}`),
      getJSON(`/api/runs/${runId}/programs/${programId}`)]);
    document.title = `evolve: run ${runId}, program #${programId}`;
    box.replaceChildren(programView.render(program, { run, page: true }));
  } catch (error) {
    box.replaceChildren(el("p", { class: "error", text: error.message }));
  }
})();
