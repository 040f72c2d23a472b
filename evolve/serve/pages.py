"""The HTML the server writes itself: the navigation bar every page shares (the script-built pages make the same
markup in common.js), the frame put around pages rendered by evolve/report (lineage, experiment report), and the
not-found page of a run, program, experiment or path that does not exist."""

from __future__ import annotations

from html import escape

from starlette.responses import HTMLResponse

Crumbs = list[tuple[str, str | None]]  # (label, link or None for the page itself)

# what the frame adds to a rendered page: the bar's stylesheet, and diffs that wrap instead of running off the page
_FRAME_HEAD = ('<link rel="stylesheet" href="/assets/nav.css">'
               "<style>pre.diff, pre.diff span { white-space: pre-wrap; overflow-wrap: anywhere; }</style>")


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
    html = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>evolve: {title.lower()}</title>\n"
            '<link rel="stylesheet" href="/assets/app.css">\n<link rel="stylesheet" href="/assets/nav.css">\n'
            '<link rel="icon" href="/assets/favicon.svg" type="image/svg+xml">\n</head>\n'
            f"<body>{nav_html(crumbs)}{body}</body>\n</html>\n")
    return HTMLResponse(html, status_code=status)
