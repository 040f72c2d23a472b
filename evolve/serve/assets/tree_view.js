// evolve serve: the drawing of a run's program tree, as SVG. Layout: parent above children (a row per generation,
// or per iteration), each subtree over its own columns (leaves left to right in id order, grouped by island, a
// parent centred over its children), edges straight from parent to child. It fills its box, zooms with the wheel
// or the buttons (around the pointer), pans by dragging, and on hover highlights a program's parent and children.
// Positions are recomputed on every view change (semantic zoom), so dots and lines keep their size at any zoom.
"use strict";

const treeView = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const PAD = { left: 60, right: 18, top: 18, bottom: 18 }; // the left margin holds the row labels
  const MAX_COLUMN = 80, MAX_ROW = 150; // px per unit at most, so a small tree is not blown up to the whole box

  function svgEl(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }

  // box: the element the SVG fills; hooks: {select(id), hover(node or null)}
  function create(box, hooks) {
    const svg = svgEl("svg", { id: "tree-svg" });
    const axis = svgEl("g", { class: "axis" }), edges = svgEl("g", { class: "edges" });
    const dots = svgEl("g", { class: "dots" });
    svg.append(axis, edges, dots);
    box.append(svg);
    const nodes = new Map(); // id -> {id, parent, island, iteration, scalar, solved, number, dot, edge, lx, row}
    const kids = new Map(); // id -> child ids, by island then id
    let lo = Infinity, hi = -Infinity, columns = 1, rows = 0, rowsBy = "generation";
    let kx = 1, ky = 1, tx = 0, ty = 0, autoFit = true, frame = 0;
    const kin = []; // the elements the hover highlighted

    function add(list, fresh) {
      const dotsOut = document.createDocumentFragment(), edgesOut = document.createDocumentFragment();
      for (const node of list) {
        if (nodes.has(node.id)) continue;
        node.number = nodes.size + 1;
        node.dot = svgEl("circle", { class: "node" + (fresh ? " fresh" : "") + (node.solved ? " solved" : ""),
          "data-id": node.id, "data-parent": node.parent === null ? "" : node.parent });
        dotsOut.append(node.dot);
        if (node.parent !== null && nodes.has(node.parent)) {
          node.edge = svgEl("line", { class: "edge", "data-child": node.id, "data-parent": node.parent });
          edgesOut.append(node.edge);
          const siblings = kids.get(node.parent) || [];
          let at = siblings.length; // ids only grow: the place is after the last sibling of this island or below
          while (at > 0 && nodes.get(siblings[at - 1]).island > node.island) at--;
          siblings.splice(at, 0, node.id);
          kids.set(node.parent, siblings);
        }
        nodes.set(node.id, node);
        lo = Math.min(lo, node.scalar);
        hi = Math.max(hi, node.scalar);
      }
      dots.append(dotsOut);
      edges.append(edgesOut);
    }

    // x: leaves get columns 0, 1, 2... in depth-first order, a parent the middle of its first and last child;
    // y: the generation (edges from the seed) or the iteration. Iterative, so a chain of 100,000 is no deep stack.
    function layout() {
      let leaf = 0, deepest = 0;
      for (const root of nodes.values()) {
        if (root.edge) continue; // not a root
        if (leaf > 0) leaf += 1; // a gap between separate trees
        root.depth = 0;
        const stack = [root], next = [0];
        while (stack.length) {
          const top = stack[stack.length - 1], children = kids.get(top.id) || [];
          const i = next[next.length - 1];
          if (i < children.length) {
            next[next.length - 1] = i + 1;
            const child = nodes.get(children[i]);
            child.depth = top.depth + 1;
            stack.push(child);
            next.push(0);
            continue;
          }
          stack.pop();
          next.pop();
          top.lx = children.length ? (nodes.get(children[0]).lx + nodes.get(children[children.length - 1]).lx) / 2
            : leaf++;
          top.row = rowsBy === "iteration" ? top.iteration : top.depth;
          deepest = Math.max(deepest, top.row);
        }
      }
      columns = Math.max(1, leaf);
      rows = deepest;
      if (autoFit) fit(); else render();
    }

    function size() {
      return { width: Math.max(200, box.clientWidth), height: Math.max(160, box.clientHeight) };
    }

    // the whole tree in the box: columns across its width, rows down its height (each scale capped)
    function fit() {
      const { width, height } = size();
      const wide = width - PAD.left - PAD.right, tall = height - PAD.top - PAD.bottom;
      kx = Math.min(MAX_COLUMN, wide / Math.max(1, columns - 1));
      ky = Math.min(MAX_ROW, tall / Math.max(1, rows));
      tx = PAD.left + (wide - kx * (columns - 1)) / 2;
      ty = PAD.top + (tall - ky * rows) / 2;
      autoFit = true;
      render();
    }

    // only what lies in the box is drawn: the rest is taken out of rendering (display: none) and left as it was
    // (an attribute change restyles even a hidden element), so zoomed in on a run of thousands the browser styles,
    // lays out and paints the few in view. The view (scales and offsets) is kept on the SVG as data-view.
    function render() {
      frame = 0;
      const span = hi - lo, { width, height } = size(), margin = 12;
      const radius = Math.min(7, Math.max(1.6, 0.32 * Math.min(kx, ky)));
      svg.classList.toggle("dense", radius < 3);
      svg.setAttribute("data-view", [kx, ky, tx, ty].join(" "));
      for (const node of nodes.values()) {
        node.x = tx + node.lx * kx;
        node.y = ty + node.row * ky;
        const inside = node.x > -margin && node.x < width + margin && node.y > -margin && node.y < height + margin;
        show(node.dot, inside);
        if (!inside) continue;
        node.dot.setAttribute("cx", node.x.toFixed(1));
        node.dot.setAttribute("cy", node.y.toFixed(1));
        const r = node.solved ? radius + 1.5 : radius, fill = evolve.colour(span > 0 ? (node.scalar - lo) / span : 1);
        if (node.r !== r) node.dot.setAttribute("r", node.r = r);
        if (node.fill !== fill) node.dot.setAttribute("fill", node.fill = fill);
      }
      for (const node of nodes.values()) {
        if (!node.edge) continue;
        const parent = nodes.get(node.parent);
        const inside = Math.max(parent.x, node.x) > 0 && Math.min(parent.x, node.x) < width &&
          Math.max(parent.y, node.y) > 0 && Math.min(parent.y, node.y) < height;
        show(node.edge, inside);
        if (!inside) continue;
        node.edge.setAttribute("x1", parent.x.toFixed(1));
        node.edge.setAttribute("y1", parent.y.toFixed(1));
        node.edge.setAttribute("x2", node.x.toFixed(1));
        node.edge.setAttribute("y2", node.y.toFixed(1));
      }
      labels();
    }

    function show(element, visible) {
      if (element.shown === visible) return;
      element.shown = visible;
      element.style.display = visible ? "" : "none";
    }

    function labels() { // the row numbers down the left margin, at most one per 18 px
      axis.replaceChildren();
      const { height } = size();
      const every = Math.max(1, Math.ceil(18 / Math.max(ky, 1e-9)));
      const first = Math.max(0, Math.ceil((0 - ty) / ky / every) * every);
      for (let r = first; r <= rows && ty + r * ky <= height; r += every) {
        const label = svgEl("text", { class: "row-label", x: 6, y: (ty + r * ky + 4).toFixed(1) });
        label.textContent = r;
        axis.append(label);
      }
      const name = svgEl("text", { class: "row-name", x: 6, y: 12 });
      name.textContent = rowsBy === "iteration" ? "iteration ↓" : "generation ↓";
      axis.append(name);
    }

    function later() { // wheel and drag events come faster than frames: draw once per frame
      if (!frame) frame = requestAnimationFrame(render);
    }

    function zoom(factor, px, py) { // around the box point (px, py)
      kx *= factor;
      ky *= factor;
      tx = px - (px - tx) * factor;
      ty = py - (py - ty) * factor;
      autoFit = false;
      later();
    }

    function zoomCentre(factor) {
      const { width, height } = size();
      zoom(factor, width / 2, height / 2);
    }

    svg.addEventListener("wheel", (event) => {
      event.preventDefault();
      const at = svg.getBoundingClientRect();
      zoom(Math.exp(-event.deltaY * 0.0015), event.clientX - at.left, event.clientY - at.top);
    }, { passive: false });

    let drag = null; // {x, y, moved}
    svg.addEventListener("pointerdown", (event) => {
      if (event.button === 0) drag = { x: event.clientX, y: event.clientY, moved: false };
    });
    window.addEventListener("pointermove", (event) => {
      if (!drag) return;
      const dx = event.clientX - drag.x, dy = event.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      drag.moved = true;
      svg.classList.add("panning");
      tx += dx;
      ty += dy;
      drag.x = event.clientX;
      drag.y = event.clientY;
      autoFit = false;
      later();
    });
    window.addEventListener("pointerup", () => {
      svg.classList.remove("panning");
      setTimeout(() => { drag = null; }, 0); // the click that ends a drag selects nothing
    });

    dots.addEventListener("click", (event) => {
      if (drag && drag.moved) return;
      const id = Number(event.target.getAttribute("data-id"));
      if (nodes.has(id)) hooks.select(id);
    });

    function unhover() {
      for (const [element, name] of kin) element.classList.remove(name);
      kin.length = 0;
    }

    function mark(element, name) {
      element.classList.add(name);
      kin.push([element, name]);
    }

    // the program under the pointer, its parent (and the edge to it) and its children (and the edges to them)
    function hover(id) {
      unhover();
      const node = nodes.get(id);
      if (!node) return hooks.hover(null);
      mark(node.dot, "hovered");
      if (node.edge) {
        mark(node.edge, "kin");
        mark(nodes.get(node.parent).dot, "kin-parent");
        edges.append(node.edge); // drawn last: on top of the others
      }
      for (const child of kids.get(id) || []) {
        const other = nodes.get(child);
        mark(other.dot, "kin-child");
        mark(other.edge, "kin");
        edges.append(other.edge);
      }
      hooks.hover(node);
    }

    dots.addEventListener("mouseover", (event) => hover(Number(event.target.getAttribute("data-id"))));
    dots.addEventListener("mouseout", () => { unhover(); hooks.hover(null); });
    // the box changes size with the window, and when the bar or the legend above it wraps to another line
    new ResizeObserver(() => { if (nodes.size) { if (autoFit) fit(); else render(); } }).observe(box);

    return {
      nodes, kids, add, layout, fit, zoomCentre, edges, dots, svg,
      range: () => [lo, hi],
      setRows(by) { rowsBy = by; autoFit = true; layout(); },
      hide(hidden) { svg.style.display = hidden ? "none" : ""; },
    };
  }

  return { create };
})();
