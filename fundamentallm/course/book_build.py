"""The book build's one Sphinx extension (``fundamentallm.course.book_build`` in ``_config.yml``).

Every hook the book's HTML needs, in one place outside the runtime modules (the model, the
explorers and the figure descriptions import no Sphinx and register nothing):

* accessibility (the descriptions :mod:`fundamentallm.a11y` stores in each plot's PNG): each
  notebook plot's ``alt`` text is its description (myst-nb otherwise writes the file's hash),
  diagrams span the margin on wide screens, bibliography entries are list items, MathJax only on
  pages with math, and the theme's 1.5 MB fontawesome.js is replaced by the icons the book shows
  (``_static/fundamentallm-icons.js``);
* the explorers (:mod:`fundamentallm.interactive`): a page keeps an explorer's frames and drops the
  widget state that the build's kernel recorded;
* the Colab button (:mod:`fundamentallm.course.colab`): each chapter's button opens its
  Colab/Jupyter edition (``colab/NN_name.ipynb``) instead of the MyST source.
"""

from __future__ import annotations

from pathlib import Path

from ..a11y import png_description
from .colab import _colab_button

# --- Accessibility ------------------------------------------------------------------------------

def _image_alt(app, doctree) -> None:
    """Each image without alt text (a notebook's plot) gets the description stored in its PNG,
    or, lacking one, a line saying it is the plot drawn by the code above."""
    from docutils import nodes

    for node in doctree.findall(nodes.image):
        if node.get("alt"):
            continue
        uri = node.get("uri", "")
        candidates = node.get("candidates", {})
        path = candidates.get("image/png") or (uri if uri.endswith(".png") else None)
        text = None
        if path:
            _rel, absolute = app.env.relfn2path(path if path.startswith("/") else "/" + path, app.env.docname)
            file = Path(absolute)
            if not file.exists():
                file = Path(app.env.relfn2path(uri, app.env.docname)[1])
            if file.exists():
                text = png_description(file.read_bytes())
        node["alt"] = text or "Plot drawn by the code cell above (no description was recorded)."


def _page_fixes(app, pagename, templatename, context, doctree) -> None:
    """HTML fixes for axe-core. Docutils marks bibliography entries with the deprecated
    ``doc-biblioentry`` role, which a ``role="list"`` may not contain (a critical
    aria-required-children error): they become list items. A hidden code cell's summary ("Show
    code cell source") is labelled "Toggle hidden content", a name without its visible text
    (label-content-name-mismatch): the label goes, and the visible text names it."""
    body = context.get("body")
    if not isinstance(body, str):
        return
    body = body.replace('role="doc-biblioentry"', 'role="listitem"')
    body = body.replace('<summary aria-label="Toggle hidden content">', "<summary>")
    context["body"] = body


def _mathjax_only_with_math(app, pagename, templatename, context, doctree) -> None:
    """MathJax (1.16 MB) only on pages that show math: myst-nb asks Sphinx to put it on every page,
    the intro and the instructors' pages included, which have none."""
    body = context.get("body")
    scripts = context.get("script_files")
    if not isinstance(body, str) or not isinstance(scripts, list):
        return
    if any(marker in body for marker in ('class="math', "\\(", "\\[", "$", "mjx-")):
        return

    def is_mathjax(script) -> bool:
        name = str(getattr(script, "filename", script) or "")
        inline = str(getattr(script, "attributes", {}).get("body", ""))
        return "mathjax" in name.lower() or "MathJax" in inline

    context["script_files"] = [s for s in scripts if not is_mathjax(s)]


STUB = ("/* FundamentaLLM: the theme's fontawesome.js (1.5 MB: all of Font Awesome) is replaced by the few "
        "icons the book shows, as inline SVG: _static/fundamentallm-icons.js. */\n")


def _small_icons(app, exception) -> None:
    """Empty the theme's fontawesome.js in the built site: ``_static/fundamentallm-icons.js``
    (on every page, like every script in ``_static/``) draws the icons instead."""
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "scripts" / "fontawesome.js"
    if (Path(app.srcdir) / "_static" / "fundamentallm-icons.js").exists() and target.parent.is_dir():
        target.write_text(STUB, encoding="utf-8")
        for extra in ("fontawesome.js.map", "fontawesome.js.LICENSE.txt"):
            (target.parent / extra).unlink(missing_ok=True)


def _wide_diagrams(app, doctree) -> None:
    """A figure showing a diagram (an SVG) is marked ``full-width``: on a wide screen it takes the
    margin too (``_static/fundamentallm.css``), so its text is not shrunk below 12 px."""
    from docutils import nodes

    for figure in doctree.findall(nodes.figure):
        if any(img.get("uri", "").endswith(".svg") for img in figure.findall(nodes.image)):
            if "full-width" not in figure["classes"]:
                figure["classes"].append("full-width")


# --- The explorers --------------------------------------------------------------------------------

def drop_widget_state(app, doctree) -> None:
    """A page keeps an explorer's frames and drops the widget state that the build's kernel
    recorded (a live widget's state, PNGs included, that no page can use without a kernel:
    ``nb_mime_priority_overrides`` already drops the widget views)."""
    pages = getattr(app.env, "nb_metadata", {})
    pages.get(app.env.docname, {}).get("js_files", {}).pop("ipywidgets_state", None)


# --- The extension --------------------------------------------------------------------------------

def setup(app):
    app.connect("doctree-read", _image_alt, priority=600)  # after the image collector (500)
    app.connect("doctree-read", _wide_diagrams)
    app.connect("doctree-read", drop_widget_state)
    app.connect("html-page-context", _page_fixes)
    app.connect("html-page-context", _mathjax_only_with_math, priority=900)  # after sphinx.ext.mathjax
    # after sphinx-book-theme's add_launch_buttons (priority 501)
    app.connect("html-page-context", _colab_button, priority=502)
    app.connect("build-finished", _small_icons)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
