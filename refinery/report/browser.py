"""Reports as a browser shows them: headless Chromium loads a copy of a ``report.html`` and says what a reader
would see go wrong — script errors, a page wider than the window, SVG labels drawn over each other or cut off
at the figure's edge, images that did not load — and takes full-page screenshots.

    check = check_page("out/report/report.html")        # PageCheck; check.ok, check.describe()
    screenshot("out/report/report.html", "report.png")  # 1000 px wide, as tall as the page
    screenshot_reports("run", "run/shots")              # every report.html under run/

The report itself is never modified: a copy, with a checking script injected as the first element of its
``<head>`` (and a ``<base>`` pointing at the report's folder so relative links still resolve), is loaded from a
temporary folder with ``chromium --headless --dump-dom``; the script writes its findings as JSON into the DOM.
Chromium 156 logs every console message at level INFO (``[…:INFO:CONSOLE:12] "msg", source: … (12)``) whatever
its level, so ``console.error`` is caught by the injected script and the log only adds the ``Uncaught …`` errors
it names (and any message logged at ERROR by other Chromium versions).

Standard library only; Chromium is found by ``find_chromium`` (``REFINERY_CHROMIUM``, else on PATH).
"""
from __future__ import annotations

import atexit
import html
import json
import os
import re
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from refinery.io.scratch import scratch_folder

TIMEOUT_S = 60
MAX_SCREENSHOT_HEIGHT = 16_000
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
_MARKER = "refinery-check"

_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio", "--no-first-run",
          "--no-default-browser-check", "--disable-extensions", "--disable-sync", "--disable-background-networking",
          "--disable-component-update", "--disable-default-apps", "--disable-breakpad", "--force-device-scale-factor=1",
          "--virtual-time-budget=5000")


def find_chromium() -> str | None:
    """``REFINERY_CHROMIUM`` if set (a path or a name on PATH), else the first Chromium/Chrome on PATH."""
    env = os.environ.get("REFINERY_CHROMIUM")
    if env:
        return shutil.which(env) or (env if Path(env).is_file() else None)
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageCheck:
    """What a browser made of a page at ``width`` × ``height`` px."""

    path: str
    width: int
    height: int
    console_errors: list[str] = field(default_factory=list)   # uncaught errors, rejections, console.error calls
    overflow_px: int = 0                  # page width beyond the window (scrollWidth − clientWidth); > 0: overflow
    overflowing: list[str] = field(default_factory=list)       # the outermost elements past the window's right edge
    overlaps: list[tuple[str, str, str]] = field(default_factory=list)   # (text, text, which figure)
    outside: list[tuple[str, str, str]] = field(default_factory=list)    # (text, which figure, by how much)
    broken_images: list[str] = field(default_factory=list)     # images (and other resources) that did not load
    scrolled: list[str] = field(default_factory=list)   # boxes scrolled sideways: content past them hidden until
                                                         # scrolled (allowed by ``ok``; "nothing clipped" asks none)
    scroll_height: int = 0                # document.documentElement.scrollHeight (at least the window's height)
    page_height: int = 0                  # the page's full height at this width (a short page: its content's)
    svgs: int = 0                         # figures (outermost <svg> elements) examined
    texts: int = 0                        # visible <text> elements in them

    @property
    def ok(self) -> bool:
        return not (self.console_errors or self.overflow_px > 0 or self.overflowing or self.overlaps
                    or self.outside or self.broken_images)

    def describe(self, limit: int = 8) -> str:
        """The problems found, one per line (for assertion messages)."""
        def block(title, items, show):
            if not items:
                return []
            lines = [f"  {title} ({len(items)}):"] + [f"    {show(i)}" for i in items[:limit]]
            return lines + ([f"    … {len(items) - limit} more"] if len(items) > limit else [])

        lines = [f"{self.path} at {self.width}×{self.height} px: " + ("ok" if self.ok else "problems")]
        lines += block("console errors", self.console_errors, str)
        if self.overflow_px > 0 or self.overflowing:
            lines.append(f"  the page is {max(self.overflow_px, 0)} px wider than the window; past its right edge:")
            lines += [f"    {e}" for e in self.overflowing[:limit]]
            if len(self.overflowing) > limit:
                lines.append(f"    … {len(self.overflowing) - limit} more")
        lines += block("overlapping SVG text", self.overlaps, lambda o: f"{o[0]!r} × {o[1]!r} in {o[2]}")
        lines += block("SVG text outside its figure", self.outside, lambda o: f"{o[0]!r} in {o[1]}: {o[2]}")
        lines += block("resources that did not load", self.broken_images, str)
        lines += block("boxes whose content is wider than they are (scrolled sideways)", self.scrolled, str)
        return "\n".join(lines)


# ---------------------------------------------------------------- the injected script

_SCRIPT = r"""
(function () {
  var R = {errors: [], failed: [], done: false, svgs: 0, texts: 0};
  var out = null;
  function str(v) {
    if (v instanceof Error) return String(v);
    if (typeof v === "object" && v !== null) { try { return JSON.stringify(v); } catch (e) { return String(v); } }
    return String(v);
  }
  function flush() {
    if (!R.done) return;
    if (!out) {
      out = document.createElement("script");
      out.type = "application/json"; out.id = "__MARKER__";
      (document.body || document.documentElement).appendChild(out);
    }
    out.textContent = JSON.stringify(R).replace(/</g, "\\u003c");
  }
  window.addEventListener("error", function (e) {
    var t = e.target;
    if (t && t !== window && t.tagName) {
      var url = t.src || t.href || (t.getAttribute && t.getAttribute("href")) || "";
      R.failed.push(t.tagName.toLowerCase() + " " + url);
    } else {
      var where = e.filename ? " (" + e.filename.split("/").pop() + ":" + e.lineno + ")" : "";
      R.errors.push((e.message || str(e.error)) + where);
    }
    flush();
  }, true);
  window.addEventListener("unhandledrejection", function (e) {
    R.errors.push("Uncaught (in promise) " + str(e.reason)); flush();
  });
  var consoleError = console.error;
  console.error = function () {
    R.errors.push("console.error: " + Array.prototype.map.call(arguments, str).join(" "));
    flush();
    return consoleError.apply(console, arguments);
  };

  function words(el, n) {
    return (el.textContent || "").replace(/\s+/g, " ").trim().slice(0, n || 40);
  }
  function name(el) {
    var s = el.tagName.toLowerCase();
    if (el.id) s += "#" + el.id;
    var c = el.getAttribute("class");
    if (c) s += "." + c.trim().split(/\s+/).join(".");
    var w = el.getAttribute("aria-label") || words(el);
    return w ? s + ' "' + w.slice(0, 40) + '"' : s;
  }
  function overflow(vw) {
    var found = [];
    function visit(el, clipped, parentOut) {
      var r = el.getBoundingClientRect(), out = false;
      if (!clipped && (r.width > 0 || r.height > 0) && r.right > vw + 1) {
        out = true;
        if (!parentOut) found.push(name(el) + ": right edge at " + Math.round(r.right) + " px");
      }
      var cs = getComputedStyle(el);
      var clips = el !== document.documentElement && el !== document.body &&
                  (cs.overflowX !== "visible" || el.tagName.toLowerCase() === "svg");
      for (var c = el.firstElementChild; c; c = c.nextElementSibling) visit(c, clipped || clips, out);
    }
    visit(document.documentElement, false, false);
    return found;
  }
  function scrolled() {
    var found = [];
    document.querySelectorAll("body *").forEach(function (el) {
      if (el.closest("svg") || getComputedStyle(el).overflowX === "visible") return;
      if (el.scrollWidth > el.clientWidth + 1)
        found.push(name(el) + ": " + el.scrollWidth + " px of content in " + el.clientWidth + " px");
    });
    return found;
  }
  function quad(t) {
    var b, m;
    try { b = t.getBBox(); m = t.getScreenCTM(); } catch (e) { return null; }
    if (!m || !(b.width > 0 && b.height > 0)) return null;
    var pts = [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]];
    pts = pts.map(function (p) { return [m.a * p[0] + m.c * p[1] + m.e, m.b * p[0] + m.d * p[1] + m.f]; });
    var xs = pts.map(function (p) { return p[0]; }), ys = pts.map(function (p) { return p[1]; });
    return {pts: pts, x0: Math.min.apply(null, xs), x1: Math.max.apply(null, xs),
            y0: Math.min.apply(null, ys), y1: Math.max.apply(null, ys)};
  }
  function area(poly) {
    var s = 0;
    for (var i = 0; i < poly.length; i++) {
      var a = poly[i], b = poly[(i + 1) % poly.length];
      s += a[0] * b[1] - b[0] * a[1];
    }
    return Math.abs(s) / 2;
  }
  function clip(subject, clipper) {
    var orient = 0;
    for (var k = 0; k < clipper.length; k++) {
      var p = clipper[k], q = clipper[(k + 1) % clipper.length];
      orient += p[0] * q[1] - q[0] * p[1];
    }
    var sgn = orient >= 0 ? 1 : -1, res = subject;
    for (var i = 0; i < clipper.length && res.length; i++) {
      var A = clipper[i], B = clipper[(i + 1) % clipper.length], input = res;
      res = [];
      var inside = function (P) { return sgn * ((B[0] - A[0]) * (P[1] - A[1]) - (B[1] - A[1]) * (P[0] - A[0])) >= 0; };
      var cross = function (P, Q) {
        var a1 = B[1] - A[1], b1 = A[0] - B[0], c1 = a1 * A[0] + b1 * A[1];
        var a2 = Q[1] - P[1], b2 = P[0] - Q[0], c2 = a2 * P[0] + b2 * P[1];
        var d = a1 * b2 - a2 * b1;
        return d === 0 ? P : [(b2 * c1 - b1 * c2) / d, (a1 * c2 - a2 * c1) / d];
      };
      for (var j = 0; j < input.length; j++) {
        var P = input[j], Q = input[(j + 1) % input.length];
        if (inside(Q)) { if (!inside(P)) res.push(cross(P, Q)); res.push(Q); }
        else if (inside(P)) res.push(cross(P, Q));
      }
    }
    return res;
  }
  function shown(el) {
    var cs = getComputedStyle(el);
    return cs.display !== "none" && cs.visibility !== "hidden" && parseFloat(cs.opacity) > 0;
  }
  function figures() {
    var overlaps = [], outside = [];
    var nodes = document.querySelectorAll("h1,h2,h3,h4,h5,h6,svg"), heading = "", index = 0;
    for (var n = 0; n < nodes.length; n++) {
      var el = nodes[n];
      if (el.tagName.toLowerCase() !== "svg") { heading = words(el, 60); continue; }
      if (el.parentElement && el.parentElement.closest("svg")) continue;
      index += 1; R.svgs = index;
      var title = el.querySelector(":scope > title");
      var where = "svg " + index + (heading ? ' under "' + heading + '"' : "") +
                  (title ? ' ("' + words(title, 60) + '")' : "");
      var box = el.getBoundingClientRect(), texts = [];
      el.querySelectorAll("text").forEach(function (t) {
        var s = words(t, 80);
        if (!s || !shown(t)) return;
        var q = quad(t);
        if (q) texts.push({s: s, q: q});
        R.texts = (R.texts || 0) + 1;
      });
      texts.forEach(function (t) {
        var q = t.q, past = [];
        if (q.x0 < box.left - 1) past.push(Math.round(box.left - q.x0) + " px left");
        if (q.x1 > box.right + 1) past.push(Math.round(q.x1 - box.right) + " px right");
        if (q.y0 < box.top - 1) past.push(Math.round(box.top - q.y0) + " px above");
        if (q.y1 > box.bottom + 1) past.push(Math.round(q.y1 - box.bottom) + " px below");
        if (past.length) outside.push([t.s, where, past.join(", ")]);
      });
      for (var i = 0; i < texts.length; i++) {
        for (var j = i + 1; j < texts.length; j++) {
          var a = texts[i].q, b = texts[j].q;
          var w = Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0), h = Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0);
          if (w <= 0 || h <= 0 || w * h <= 1) continue;
          if (texts[i].s === texts[j].s && Math.abs(a.x0 - b.x0) < 0.5 && Math.abs(a.y0 - b.y0) < 0.5 &&
              Math.abs(a.x1 - b.x1) < 0.5 && Math.abs(a.y1 - b.y1) < 0.5) continue;
          var common = area(clip(a.pts, b.pts));
          if (common > 1)
            overlaps.push([texts[i].s, texts[j].s, where + ": " + common.toFixed(1) + " px\u00b2 in common"]);
        }
      }
    }
    return {overlaps: overlaps, outside: outside};
  }
  function run() {
    try {
      var de = document.documentElement, vw = de.clientWidth || window.innerWidth;
      R.viewport = [window.innerWidth, window.innerHeight];
      R.overflow_px = de.scrollWidth - vw;
      R.scroll_height = Math.max(de.scrollHeight, document.body ? document.body.scrollHeight : 0);
      R.page_height = R.scroll_height > window.innerHeight ? R.scroll_height
                                                            : Math.ceil(de.getBoundingClientRect().height);
      R.overflowing = overflow(vw);
      R.scrolled = scrolled();
      var f = figures();
      R.overlaps = f.overlaps; R.outside = f.outside;
      document.querySelectorAll("img").forEach(function (im) {
        if (im.complete && im.naturalWidth === 0) R.failed.push("img " + (im.currentSrc || im.src || "(no src)"));
      });
    } catch (e) {
      R.errors.push("refinery check script: " + str(e));
    }
    R.done = true;
    flush();
  }
  window.addEventListener("load", function () {
    var fonts = document.fonts ? document.fonts.ready : Promise.resolve();
    fonts.then(function () { setTimeout(run, 0); });
  });
})();
""".replace("__MARKER__", _MARKER)
# one line (so the page's own lines keep their numbers in error messages): the script has no // comments
_SCRIPT = " ".join(line.strip() for line in _SCRIPT.splitlines() if line.strip())

_HEAD = re.compile(r"<head\b[^>]*>", re.I)
_HTML = re.compile(r"<html\b[^>]*>", re.I)
_DOCTYPE = re.compile(r"^\s*<!doctype[^>]*>", re.I)
_RESULT = re.compile(r'<script type="application/json" id="' + _MARKER + r'">(.*?)</script>', re.S)
# [pid:tid:date:INFO:CONSOLE:12] "message", source: file:///… (12)   (older Chromium: INFO:CONSOLE(12))
_CONSOLE = re.compile(r':(INFO|WARNING|ERROR|FATAL|VERBOSE\d*):CONSOLE[:(]?\d*\)?\] "(.*?)", source: (\S*) \((\d+)\)',
                      re.S)

_PUBLISHING = re.compile(r"\.tmp-\d+-[^/]+(?=/)")
_lock = threading.RLock()
_tmp: Path | None = None


def _workdir() -> Path:
    """One temporary folder per process (the page copies, screenshots in progress, Chromium's profile)."""
    global _tmp
    if _tmp is None or not _tmp.is_dir():
        _tmp = Path(scratch_folder("browser-"))
        atexit.register(shutil.rmtree, _tmp, True)
    return _tmp


def _instrumented(page: Path) -> str:
    """The page's HTML with the checking script first in <head>, then a <base> at the page's own folder."""
    text = page.read_text(encoding="utf-8", errors="replace")
    inject = (f"<script>{_SCRIPT}</script>"
              f'<base href="{html.escape(page.resolve().parent.as_uri() + "/")}">')
    m = _HEAD.search(text)
    if m:
        return text[:m.end()] + inject + text[m.end():]
    m = _HTML.search(text) or _DOCTYPE.search(text)
    at = m.end() if m else 0
    return text[:at] + f"<head>{inject}</head>" + text[at:]


def _chromium(args: list[str], what: str) -> tuple[str, str]:
    """Run Chromium with ``args``; (stdout, stderr). A clear error when it is missing, fails or hangs."""
    exe = find_chromium()
    if exe is None:
        raise RuntimeError("chromium not found: install it (apt-get install chromium) or set REFINERY_CHROMIUM")
    profile = _workdir() / "profile"
    cmd = [exe, *_FLAGS, f"--user-data-dir={profile}", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True, text=True, errors="replace")
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # the browser and its renderer/GPU processes (our session)
        except ProcessLookupError:
            pass
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(profile, ignore_errors=True)   # its locks name a killed browser: start the next afresh
        raise TimeoutError(f"chromium did not finish {what} within {TIMEOUT_S} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"chromium failed ({proc.returncode}) {what}:\n{_noise_free(err)[-2000:]}")
    return out, err


def _noise_free(stderr: str) -> str:
    """Chromium's stderr without the D-Bus, GPU and launcher chatter of a headless machine."""
    noise = ("dbus", "DBus", "D-Bus", "vaapi", "sandbox_linux", "bluez", "Floss", "idle_linux", "Histogram:",
             "unexpected operator", "gpu_init", "viz_main", "command_buffer", "Fontconfig")
    return "\n".join(line for line in stderr.splitlines() if line.strip() and not any(n in line for n in noise))


def _log_errors(stderr: str) -> list[str]:
    """Console messages in Chromium's log that are errors: logged at ERROR, or naming an uncaught error."""
    errors = []
    for level, message, source, line in _CONSOLE.findall(stderr):
        if level in ("ERROR", "FATAL") or message.startswith("Uncaught"):
            errors.append(f"{message} ({source.rsplit('/', 1)[-1]}:{line})")
    return errors


def _same(a: str, b: str) -> bool:
    """One error reported by both the page's script and Chromium's log: the messages, less where, agree."""
    def bare(s: str) -> str:
        s = re.sub(r"^console\.error: ", "", s.strip())
        return (s.splitlines() or [""])[0].rsplit(" (", 1)[0].strip()
    a, b = bare(a), bare(b)
    return bool(a and b) and (a.startswith(b) or b.startswith(a))


def check_page(html_path, width: int = 1000, height: int = 1400) -> PageCheck:
    """Load a copy of the page in headless Chromium at ``width`` × ``height`` px and report what went wrong."""
    page = Path(html_path)
    if not page.is_file():
        raise FileNotFoundError(f"no page at {page}")
    with _lock:
        copy = _workdir() / page.name      # errors name the report's file, at its own line numbers
        copy.write_text(_instrumented(page), encoding="utf-8")
        out, err = _chromium(["--enable-logging=stderr", "--v=0", f"--window-size={width},{height}",
                              "--dump-dom", copy.as_uri()], f"loading {page}")
    found = _RESULT.findall(out)
    if not found:
        raise RuntimeError(f"chromium loaded {page} but its check did not run (no load event within the "
                           f"virtual time budget?):\n{_noise_free(err)[-2000:]}")
    r = json.loads(found[-1])
    errors = list(r.get("errors", []))
    errors += [e for e in _log_errors(err) if not any(_same(e, mine) for mine in errors)]
    return PageCheck(path=str(page), width=width, height=height, console_errors=errors,
                     overflow_px=int(round(r.get("overflow_px", 0))), overflowing=r.get("overflowing", []),
                     overlaps=[tuple(o) for o in r.get("overlaps", [])],
                     outside=[tuple(o) for o in r.get("outside", [])],
                     broken_images=list(dict.fromkeys(r.get("failed", []))), scrolled=r.get("scrolled", []),
                     scroll_height=int(r.get("scroll_height", 0)), page_height=int(r.get("page_height", 0)),
                     svgs=int(r.get("svgs", 0)), texts=int(r.get("texts", 0)))


def screenshot(html_path, png_path, width: int = 1000, height: int | None = None) -> Path:
    """A PNG of the page ``width`` px wide: as tall as the page (at most 16,000 px) unless ``height`` is given."""
    page, png = Path(html_path), Path(png_path)
    if height is None:
        measured = check_page(page, width)
        height = measured.page_height or measured.scroll_height or 1400
    height = max(1, min(int(height), MAX_SCREENSHOT_HEIGHT))
    png.parent.mkdir(parents=True, exist_ok=True)
    with _lock:
        shot = _workdir() / "shot.png"
        shot.unlink(missing_ok=True)
        _chromium([f"--window-size={width},{height}", f"--screenshot={shot}", page.resolve().as_uri()],
                  f"taking a screenshot of {page}")
        if not shot.is_file():
            raise RuntimeError(f"chromium wrote no screenshot of {page}")
        shutil.move(str(shot), str(png))
    return png


def screenshot_reports(root, into) -> list[Path]:
    """A screenshot of every ``report.html`` under ``root``, as ``into/<path with / as __>.png``
    (``01-audit/report/report.html`` → ``01-audit__report__report.png``).

    A folder being published (refinery's atomic writes: ``<name>.tmp-<pid>-<run>``) is named as the folder it
    becomes, and its report is taken instead of the finished folder's older one."""
    root, into = Path(root), Path(into)
    pages: dict[str, Path] = {}
    for page in sorted(root.rglob("report.html")):
        rel = _PUBLISHING.sub("", page.relative_to(root).as_posix())
        if rel not in pages or page.as_posix() != (root / rel).as_posix():
            pages[rel] = page
    return [screenshot(page, into / (rel.replace("/", "__")[: -len(".html")] + ".png"))
            for rel, page in sorted(pages.items())]
