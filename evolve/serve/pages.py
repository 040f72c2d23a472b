"""The HTML the server writes itself: the head every page shares, the pages the browser builds with scripts (their
bodies are assets/index.html, run.html and program.html), the navigation bar every page shares (the script-built
pages make the same markup in common.js), the frame put around pages rendered by evolve/report (lineage, experiment
report), and the not-found page of a run, program, experiment or path that does not exist."""

from __future__ import annotations

import hashlib
from html import escape
from pathlib import Path

from starlette.responses import HTMLResponse, Response

ASSETS = Path(__file__).parent / "assets"

Crumbs = list[tuple[str, str | None]]  # (label, link or None for the page itself)

# what the frame adds to a rendered page (a report, a lineage): the bar's stylesheet
_FRAME_HEAD = '<link rel="stylesheet" href="/assets/nav.css">'


# the pages built by scripts: the file in assets/ holding the page's <body>, its title, the scripts it runs (after
# common.js, which every one of them runs first)
SCRIPTED_PAGES = {
    "index.html": ("runs and experiments", ("index.js",)),
    "run.html": ("run", ("detail.js", "tree_view.js", "tree.js")),
    "program.html": ("program", ("detail.js", "program.js")),
}


def document(title: str, body: str, scripts: tuple[str, ...] = ()) -> str:
    """A whole page: the head every page shares (charset, viewport, the stylesheets, the icon), titled "evolve:
    TITLE", running `scripts` from /assets (deferred, in order), then `body` (its <body> element)."""
    loads = "".join(f'<script src="/assets/{script}" defer></script>\n' for script in scripts)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>evolve: {escape(title)}</title>\n"
            '<link rel="stylesheet" href="/assets/app.css">\n<link rel="stylesheet" href="/assets/nav.css">\n'
            f'<link rel="icon" href="/assets/favicon.svg" type="image/svg+xml">\n{loads}</head>\n'
            f"{body.rstrip()}\n</html>\n")


def scripted_page(name: str, if_none_match: str | None = None) -> Response:
    """One of SCRIPTED_PAGES: its body from assets/ (read on each request, as a file is served) in the shared head,
    with an ETag of its bytes: a browser revalidates it (no-cache) and gets 304, no body, while it is unchanged."""
    title, scripts = SCRIPTED_PAGES[name]
    page = document(title, (ASSETS / name).read_text(encoding="utf-8"), ("common.js", *scripts)).encode()
    etag = f'"{hashlib.sha256(page).hexdigest()[:20]}"'
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if if_none_match is not None and etag in (tag.strip() for tag in if_none_match.split(",")):
        return Response(status_code=304, headers=headers)
    return HTMLResponse(page, headers=headers)


def nav_html(crumbs: Crumbs) -> str:
    """The bar: "evolve" (the runs list), then each crumb; the same markup as common.js's topBar."""
    links = "".join(f'<a href="{escape(href)}">{escape(label)}</a>' if href else f"<span>{escape(label)}</span>"
                    for label, href in crumbs)
    return f'<header class="top"><a class="brand" href="/">evolve</a>{links}</header>'


def framed(html: str, crumbs: Crumbs) -> str:
    """A page rendered by evolve/report with the bar at the top of its body and the bar's stylesheet."""
    return html.replace("</head>", f"{_FRAME_HEAD}</head>", 1).replace("<body>", f"<body>{nav_html(crumbs)}", 1)


def error_page(message: str, crumbs: Crumbs, back: tuple[str, str], status: int = 404) -> HTMLResponse:
    """The page for a run, program, experiment or path that does not exist (404), or one that cannot be shown: the
    bar, what went wrong in one line, and a link to somewhere that exists."""
    label, href = back
    title = "Not found" if status == 404 else "Cannot show this page"
    body = (f'<main class="not-found"><h1>{title}</h1><p id="not-found" class="error">{escape(message)}</p>'
            f'<p><a id="back" href="{escape(href)}">back to {escape(label)}</a></p></main>')
    return HTMLResponse(document(title.lower(), f"<body>{nav_html(crumbs)}{body}</body>"), status_code=status)
