/* FundamentaLLM: the book on any screen and for any reader. Jupyter Book adds every .js file of
   _static/ to every page (in <head>, so each part waits for the DOM). tests/test_browser.py checks
   each behaviour in Chromium at 390 and 1280 px.

   1. Sidebar buttons. pydata-sphinx-theme 0.17.1 (the version sphinx-book-theme 1.3 pins) binds
      its menu and "Contents" buttons with document.querySelector, which finds a hidden copy of each
      button, so the visible ones do nothing below 992 px, and sphinx-book-theme's desktop sidebar
      toggle is bound to the same hidden copy (pydata-sphinx-theme issue #2451). One listener on the
      document, in the capture phase, now handles every copy: on a wide screen the menu button
      hides or shows the sidebar; otherwise the button opens the sidebar in the theme's dialog.
   2. Sideways scrolling. A box that scrolls sideways (a diagram or an interactive figure on a phone,
      a wide table, a long code line) shows a shadow and an arrow on the side where there is more,
      and can be scrolled from the keyboard (it is focusable, with a name).
   3. Enlarging. Every plot and diagram has an "Enlarge" button (tapping the image does the same):
      the figure opens at full size in a dialog that scrolls both ways; Escape or "Close" closes it.
   4. Print. Interactive figures print their default frame, the printed title its chapter number
      (see fundamentallm.css for the rest).
   5. Tables printed as text keep each row on one line on a phone and scroll sideways instead. */
(function () {
  "use strict";
  const onReady = (fn) => {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fn);
    else fn();
  };

  /* 1. Sidebar buttons ------------------------------------------------------------------------ */
  const WIDE = "(min-width: 992px)";
  const SIDEBAR_DIALOG = "#pst-primary-sidebar-modal, #pst-secondary-sidebar-modal";

  // The sidebar keeps its classes while its content is shown in the dialog (the dialog gets a
  // copy, for the theme's styles): the theme's scripts look the sidebars up by class
  // (sphinx-book-theme: "div.bd-sidebar-secondary", when a wide figure scrolls into view), and
  // found nothing while the panel was open.
  function closeButton(dialog) {
    let button = document.querySelector(`#${dialog.id} .fl-dialog-close, #${dialog.id.replace("-modal", "")} .fl-dialog-close`);
    if (!button) {
      button = document.createElement("button");
      button.type = "button";
      button.className = "fl-dialog-close";
      button.textContent = "Close";
      button.addEventListener("click", () => dialog.close());
    }
    if (button.parentElement !== dialog) dialog.prepend(button);
    return button;
  }

  function openInDialog(sidebar, dialog, button) {
    if (dialog.open) return;
    const close = closeButton(dialog);
    Array.from(sidebar.childNodes).forEach((node) => dialog.appendChild(node));
    Array.from(sidebar.classList).forEach((name) => dialog.classList.add(name));
    dialog.setAttribute("aria-label", button.classList.contains("primary-toggle")
      ? "Site navigation" : "Contents of this page");
    dialog.addEventListener("close", () => {
      // The theme's own "close" listener may have moved everything back already, the close
      // button included: the button stays with the dialog, the rest goes back to the sidebar.
      Array.from(dialog.childNodes).forEach((node) => { if (node !== close) sidebar.appendChild(node); });
      if (close.parentElement !== dialog) dialog.prepend(close);
      Array.from(dialog.classList).forEach((name) => {
        dialog.classList.remove(name);
        sidebar.classList.add(name);
      });
      const target = dialog._flTarget;
      dialog._flTarget = null;
      if (target) {  // a section of this page was picked: the keyboard continues from there
        if (!target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
        target.focus({ preventScroll: true });
      } else {
        button.focus({ preventScroll: true });
      }
    }, { once: true });
    dialog.showModal();
    close.focus({ preventScroll: true });
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest && event.target.closest(".primary-toggle, .secondary-toggle");
    if (!button) return;
    const primary = button.classList.contains("primary-toggle");
    const sidebar = document.getElementById(primary ? "pst-primary-sidebar" : "pst-secondary-sidebar");
    const dialog = document.getElementById(primary ? "pst-primary-sidebar-modal" : "pst-secondary-sidebar-modal");
    if (!sidebar || !dialog) return; // a page without that sidebar: leave it to the theme
    // The theme's own listeners (bound to one copy of the button) must not run as well.
    event.preventDefault();
    event.stopPropagation();
    if (primary && window.matchMedia(WIDE).matches) {
      const hidden = sidebar.classList.toggle("pst-sidebar-hidden");
      document.querySelectorAll(".primary-toggle").forEach((b) => b.setAttribute("aria-expanded", String(!hidden)));
      return;
    }
    openInDialog(sidebar, dialog, button);
  }, true);

  // Picking a link in the panel (a chapter, or a section of this page) closes it, as the theme's
  // own panel does on a small screen; the link is followed as usual.
  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("a[href]");
    const dialog = link && link.closest(SIDEBAR_DIALOG);
    if (!dialog || !dialog.open) return;
    const url = new URL(link.href, location.href);
    if (url.pathname === location.pathname && url.hash) {
      dialog._flTarget = document.getElementById(decodeURIComponent(url.hash.slice(1)));
    }
    dialog.close();
  });

  // Escape closes the panel wherever the focus is (a tap inside it can leave the focus on the
  // page behind, where the dialog's own Escape handling never sees the key).
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    const open = Array.from(document.querySelectorAll(SIDEBAR_DIALOG)).find((d) => d.open);
    if (!open) return;
    event.preventDefault();
    open.close();
  }, true);

  // A click on the dialog's backdrop (outside its box) closes it.
  document.addEventListener("click", (event) => {
    const dialog = event.target;
    if (!(dialog instanceof HTMLDialogElement) || !dialog.open) return;
    if (!/sidebar-modal$/.test(dialog.id) && !dialog.classList.contains("fl-zoom")) return;
    const r = dialog.getBoundingClientRect();
    const inside = event.clientX >= r.left && event.clientX <= r.right && event.clientY >= r.top && event.clientY <= r.bottom;
    if (!inside || dialog.classList.contains("fl-zoom")) dialog.close();
  });

  // The colour-mode switch toggles light and dark. The theme's cycles light -> auto -> dark, and
  // "auto" on a light system looks the same as light: the first click seemed to do nothing. The
  // stored mode is set so that the theme's own handler, which runs next, lands on the other one.
  document.addEventListener("click", (event) => {
    if (!(event.target.closest && event.target.closest(".theme-switch-button"))) return;
    const dark = window.matchMedia("(prefers-color-scheme: dark)").matches;
    const cycle = dark ? ["auto", "light", "dark"] : ["auto", "dark", "light"];  // the theme's order
    const want = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
    try {
      localStorage.setItem("mode", cycle[(cycle.indexOf(want) + cycle.length - 1) % cycle.length]);
    } catch (e) { /* no storage: the theme cycles as it does */ }
  }, true);

  // A keyboard user reaches the next page in two Tab stops: a second skip link, beside the
  // theme's "Skip to main content" (shown only when focused), goes where the page's "next" link
  // at the bottom goes -- past the 120-180 links, copy buttons and code boxes of a chapter.
  function addSkipToNext() {
    const next = document.querySelector(".prev-next-area a.right-next");
    const skip = document.getElementById("pst-skip-link");
    if (!next || !skip || skip.querySelector(".fl-skip-next")) return;
    const title = next.querySelector(".prev-next-title");
    const link = document.createElement("a");
    link.className = "fl-skip-next";
    link.href = next.getAttribute("href");
    link.textContent = "Skip to the next page" + (title ? ": " + title.textContent.trim() : "");
    skip.appendChild(link);
  }

  onReady(() => {
    addSkipToNext();
    document.querySelectorAll(".primary-toggle").forEach((b) => {
      if (!b.hasAttribute("aria-label")) b.setAttribute("aria-label", "Site navigation");
      b.setAttribute("aria-expanded", String(window.matchMedia(WIDE).matches));
    });
    document.querySelectorAll(".secondary-toggle").forEach((b) => {
      if (!b.hasAttribute("aria-label")) b.setAttribute("aria-label", "Contents of this page");
      b.setAttribute("aria-haspopup", "dialog");
    });
  });

  /* 2. Boxes that scroll sideways -------------------------------------------------------------- */
  const SCROLLERS = [
    ".bd-article figure",
    ".bd-article .fl-explorer",
    ".bd-article .cell_output .output > div",
    ".bd-article .pst-scrollable-table-container",
    ".bd-article .table-wrapper",
    ".bd-article div.highlight > pre",
    ".bd-article div.math > mjx-container[display='true']",
  ].join(",");

  const usedLabels = new Map();

  function unique(label) {  // landmarks need distinct names
    const n = (usedLabels.get(label) || 0) + 1;
    usedLabels.set(label, n);
    return n === 1 ? label : `${label} (${n})`;
  }

  function describe(box) {
    if (box.matches("pre")) {
      const first = box.textContent.split("\n").find((line) => line.trim()) || "";
      return "Code: " + first.trim().slice(0, 40);
    }
    const img = box.querySelector("img");
    if (box.querySelector("table")) return "Table";
    if (box.classList.contains("fl-explorer")) {
      const title = box.querySelector(".fl-title");
      return "Interactive figure" + (title ? ": " + title.textContent.trim() : "");
    }
    const caption = box.querySelector("figcaption");
    if (caption) return "Figure: " + caption.textContent.trim().split(/(?<=\.)\s/)[0];
    if (img && img.alt) return "Figure: " + img.alt.split(/(?<=\.)\s/)[0];
    return "Wide content";
  }

  function updateScroller(box) {
    const overflow = box.scrollWidth - box.clientWidth > 2;
    const wrap = box.parentElement && box.parentElement.classList.contains("fl-scroll") ? box.parentElement : null;
    if (!overflow) {
      if (wrap) wrap.classList.remove("fl-overflows", "fl-more-left", "fl-more-right");
      if (box.dataset.flScroll === "1") {
        box.removeAttribute("tabindex");
        box.removeAttribute("role");
        box.removeAttribute("aria-label");
        delete box.dataset.flScroll;
      }
      return;
    }
    let w = wrap;
    if (!w) {
      w = document.createElement("div");
      w.className = "fl-scroll";
      box.parentNode.insertBefore(w, box);
      w.appendChild(box);
      const hint = document.createElement("span");
      hint.className = "fl-scroll-hint";
      hint.setAttribute("aria-hidden", "true");
      hint.textContent = "scroll \u2192";
      w.appendChild(hint);
      box.addEventListener("scroll", () => updateScroller(box), { passive: true });
    }
    // A code box that holds its copy button (moveCopyButtons) is reached by Tab through that
    // button, whose arrow keys scroll the box: one Tab stop per code box, not two.
    if (box.matches("pre") && box.querySelector(":scope > button.copybtn")) {
      keepOutOfTabOrder(box);
    } else if (!box.hasAttribute("tabindex")) {
      // Focusable even when it holds a button or a slider: the arrow keys scroll only a focused box.
      box.setAttribute("tabindex", "0");
      box.dataset.flScroll = "1";
    }
    // An equation is read by its own MathML (a label would replace it). An interactive figure is
    // a named region (a landmark); a code box, an output or a table is a named group (not a
    // landmark: a chapter has dozens); a <figure> keeps its own role, which allows the name too.
    if (box.dataset.flScroll === "1" && !box.matches("mjx-container")) {
      if (!box.matches("figure")) box.setAttribute("role", box.matches(".fl-explorer") ? "region" : "group");
      if (!box.hasAttribute("aria-label")) box.setAttribute("aria-label", unique(describe(box) + ", scrolls sideways"));
    }
    w.classList.add("fl-overflows");
    w.classList.toggle("fl-more-left", box.scrollLeft > 2);
    w.classList.toggle("fl-more-right", box.scrollLeft + box.clientWidth < box.scrollWidth - 2);
  }

  // pydata-sphinx-theme makes every overflowing <pre> a Tab stop on load and on resize: a code box
  // reached through its copy button is kept out of the Tab order (still focusable by script).
  const tabWatch = new MutationObserver((changes) => changes.forEach((c) => {
    if (c.target.tabIndex !== -1 && c.target.querySelector(":scope > button.copybtn")) c.target.tabIndex = -1;
  }));
  function keepOutOfTabOrder(pre) {
    pre.tabIndex = -1;
    if (!pre.dataset.flTabWatch) {
      pre.dataset.flTabWatch = "1";
      tabWatch.observe(pre, { attributes: true, attributeFilter: ["tabindex"] });
    }
  }

  // sphinx-copybutton puts each copy button beside its code; inside the <pre> it stays where it
  // was (its position is taken from the box around the code) and becomes the box's focusable
  // content: with the button focused, the arrow keys, Home and End scroll the code sideways.
  function moveCopyButtons() {
    document.querySelectorAll(".bd-article div.highlight button.copybtn").forEach((button) => {
      const pre = button.closest("div.highlight").querySelector("pre");
      if (pre && button.parentElement !== pre) pre.appendChild(button);
    });
  }
  document.addEventListener("keydown", (event) => {
    const button = event.target.closest && event.target.closest("pre > button.copybtn");
    if (!button || event.altKey || event.ctrlKey || event.metaKey) return;
    const pre = button.parentElement, step = 40;
    const to = { ArrowLeft: pre.scrollLeft - step, ArrowRight: pre.scrollLeft + step, Home: 0, End: pre.scrollWidth }[event.key];
    if (to === undefined || pre.scrollWidth <= pre.clientWidth) return;
    event.preventDefault();
    pre.scrollLeft = to;
  });

  function updateAllScrollers() {
    const boxes = new Set([...document.querySelectorAll(SCROLLERS), ...document.querySelectorAll(".fl-scroll > :first-child")]);
    boxes.forEach((box) => {
      const style = getComputedStyle(box);
      if (style.overflowX === "auto" || style.overflowX === "scroll") updateScroller(box);
    });
  }

  /* 3. Enlarging plots and diagrams ------------------------------------------------------------ */
  let zoom = null;

  function zoomDialog() {
    if (zoom) return zoom;
    zoom = document.createElement("dialog");
    zoom.className = "fl-zoom";
    zoom.setAttribute("aria-label", "Enlarged figure");
    zoom.innerHTML = '<button type="button" class="fl-zoom-close">Close</button><div class="fl-zoom-body"><img alt=""></div>';
    zoom.querySelector(".fl-zoom-close").addEventListener("click", () => zoom.close());
    document.body.appendChild(zoom);
    return zoom;
  }

  function enlarge(img, opener) {
    const dialog = zoomDialog();
    const big = dialog.querySelector("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    // At least as wide as the screen; a diagram (SVG) at least 1.5 times its width on the page.
    const svg = /\.svg($|\?)/.test(big.src);
    // An interactive figure's frame has twice the pixels of its width on the page: on a phone it
    // opens at up to 2.5 screens wide, elsewhere at up to the screen's width.
    const shown = +img.getAttribute("width") || 0;
    const natural = shown && img.naturalWidth > 1.5 * shown
      ? Math.max(shown, Math.min(img.naturalWidth, window.innerWidth < 600 ? 2.5 * window.innerWidth : window.innerWidth - 24))
      : img.naturalWidth || 0;
    const width = Math.max(natural, svg ? img.clientWidth * 1.5 : 0, 320);
    big.style.width = Math.round(width) + "px";
    dialog.addEventListener("close", () => opener.focus(), { once: true });
    dialog.showModal();
    dialog.querySelector(".fl-zoom-close").focus();
  }

  function addEnlargeButtons() {
    const images = document.querySelectorAll(".bd-article .cell_output img, .bd-article figure img");
    images.forEach((img) => {
      if (img.dataset.flZoom || img.closest("a")) return;
      img.dataset.flZoom = "1";
      const button = document.createElement("button");
      button.type = "button";
      button.className = "fl-enlarge";
      button.textContent = "Enlarge";
      button.setAttribute("aria-label", "Enlarge the figure");
      button.addEventListener("click", () => enlarge(img, button));
      img.addEventListener("click", () => enlarge(img, button));
      img.classList.add("fl-zoomable");
      const holder = document.createElement("span");
      holder.className = "fl-zoom-holder";
      img.parentNode.insertBefore(holder, img);
      holder.appendChild(img);
      holder.appendChild(button);
    });
  }

  /* 4. Print: interactive figures print their first (default) frame ----------------------------- */
  function rememberDefaultFrames() {
    document.querySelectorAll(".fl-explorer img").forEach((img) => {
      if (!img.dataset.flDefault) img.dataset.flDefault = img.getAttribute("src");
    });
  }
  window.addEventListener("beforeprint", () => {
    document.querySelectorAll(".fl-explorer img[data-fl-default]").forEach((img) => {
      img.dataset.flShown = img.getAttribute("src");
      img.setAttribute("src", img.dataset.flDefault);
    });
  });
  window.addEventListener("afterprint", () => {
    document.querySelectorAll(".fl-explorer img[data-fl-shown]").forEach((img) => {
      img.setAttribute("src", img.dataset.flShown);
      delete img.dataset.flShown;
    });
  });

  /* 5. Tables printed as text keep their rows (see fundamentallm.css) ------------------------- */
  function markTextTables() {
    document.querySelectorAll(".bd-article .cell_output .output.stream pre").forEach((pre) => {
      const lines = pre.textContent.split("\n").filter((line) => line.trim());
      const aligned = lines.filter((line) => /\S {2,}\S/.test(line.trim())).length;
      if (lines.length >= 3 && aligned >= Math.max(2, lines.length / 2)) pre.classList.add("fl-text-table");
    });
  }

  // A solution's title says, in print only, that its body is left out (fundamentallm.css).
  function markSolutionsForPrint() {
    document.querySelectorAll(".bd-article div.solution > .admonition-title").forEach((title) => {
      if (title.querySelector(".fl-print-only")) return;
      const note = document.createElement("span");
      note.className = "fl-print-only";
      note.textContent = " \u2014 left out of the printout: read it in the online book";
      title.appendChild(note);
    });
  }

  // The printed title (sphinx-book-theme prints its own h1, the page's title without the chapter
  // number, and hides the article's) carries the chapter number, as on screen.
  function numberPrintedTitle() {
    const printed = document.querySelector("#jb-print-docs-body > h1");
    const number = document.querySelector(".bd-article h1 .section-number");
    if (!printed || !number || printed.querySelector(".section-number")) return;
    printed.prepend(number.cloneNode(true));
  }

  onReady(() => {
    numberPrintedTitle();
    markSolutionsForPrint();
    markTextTables();
    rememberDefaultFrames();
    addEnlargeButtons();
    updateAllScrollers();
    window.addEventListener("load", () => {
      moveCopyButtons();
      updateAllScrollers();
      // Display equations exist once MathJax has typeset them (it loads deferred).
      const mj = window.MathJax;
      if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(updateAllScrollers);
    });
    let pending = null;
    window.addEventListener("resize", () => {
      clearTimeout(pending);
      pending = setTimeout(updateAllScrollers, 150);
    });
  });
})();
