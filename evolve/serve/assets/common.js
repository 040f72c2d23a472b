// evolve serve: helpers every page shares. Text from the store (code, prompts, names) is only ever set as
// textContent, never as HTML.
"use strict";

const evolve = (() => {
  // the store this page is of: "" for the first store served, "/stores/K" for another (see serve/routes.py)
  const BASE = (location.pathname.match(/^\/stores\/\d+(?=\/|$)/) || [""])[0];
  const link = (path) => BASE + path; // a path of this store's pages and endpoints
  const path = () => location.pathname.slice(BASE.length); // this page's path below its store's base

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "onclick") node.addEventListener("click", value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  async function getJSON(url) {
    const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    let body = null;
    try { body = await response.json(); } catch (_) { body = null; }
    if (!response.ok) {
      const reason = body && body.error ? body.error : `${response.status} ${response.statusText}`;
      throw new Error(reason);
    }
    return body;
  }

  function num(value, digits = 4) {
    if (value === null || value === undefined) return "-";
    if (!Number.isFinite(value)) return String(value);
    return Number(value).toPrecision(digits).replace(/\.?0+(e|$)/, "$1");
  }

  // viridis, five stops: low scores dark purple, high scores yellow
  const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function colour(fraction) {
    const t = Math.min(1, Math.max(0, Number.isFinite(fraction) ? fraction : 0)) * (STOPS.length - 1);
    const i = Math.min(STOPS.length - 2, Math.floor(t));
    const f = t - i;
    const rgb = STOPS[i].map((c, k) => Math.round(c + (STOPS[i + 1][k] - c) * f));
    return `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;
  }

  function statusBadge(status) {
    return el("span", { class: `badge status-${status}`, text: status });
  }

  function topBar(crumbs) {
    const bar = el("header", { class: "top" }, el("a", { class: "brand", href: "/", text: "evolve" }));
    for (const [label, href] of crumbs) bar.append(href ? el("a", { href, text: label }) : el("span", { text: label }));
    return bar;
  }

  return { BASE, el, getJSON, link, path, num, colour, statusBadge, topBar };
})();
