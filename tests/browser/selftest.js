/*
 * selftest.js - checks the HTML report from inside a real browser.
 *
 * test_browser_report.sh inserts this script at the top of a copy of a report
 * made by `cubemem replay --html`, opens the copy in headless Chromium and
 * reads the DOM back (--dump-dom). The script
 *   - records every script error, unhandled rejection and console.error,
 *   - on load, checks that every chart exists and has drawn something, that
 *     the numbers shown (summary table, breakdown bars, hover readout, hover
 *     card) equal the embedded JSON (formatted by a formatter of its own),
 *   - drives the page with synthetic mouse events: drag to zoom,
 *     double-click to reset, hover, click to pick a moment, the time/event
 *     switch, hover on an allocation,
 *   - measures first paint and the page's own drawing time,
 * and writes one line per check ("ok ..." / "not ok ...") plus a final
 * "SELFTEST pass=N fail=M" line into <pre id="selftest-result">.
 */
(function () {
  "use strict";
  const errors = [];
  window.addEventListener("error", e => errors.push("script error: " + e.message + " (" + (e.filename || "?") + ":" + (e.lineno || 0) + ")"));
  window.addEventListener("unhandledrejection", e => errors.push("unhandled rejection: " + e.reason));
  const consoleError = console.error.bind(console);
  console.error = function () {
    errors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    consoleError.apply(null, arguments);
  };

  const lines = [];
  let pass = 0, fail = 0;
  function check(cond, name, detail) {
    if (cond) { pass++; lines.push("ok " + name); }
    else { fail++; lines.push("not ok " + name + (detail !== undefined ? " -- " + detail : "")); }
  }
  function metric(name, value) { lines.push("metric " + name + "=" + value); }

  /* An independent formatter, as cubemem's text report: decimal units. */
  function bytes(b) {
    if (b < 1000) return b + " B";
    const units = ["KB", "MB", "GB", "TB", "PB", "EB"];
    let e = 0, v = b / 1000;
    while (v >= 1000 && e < units.length - 1) { v /= 1000; e++; }
    /* log-based exponent of the C code can differ on exact powers: 1 GB */
    return v.toFixed(2) + " " + units[e];
  }
  const DASH = "\u2014";

  function mouse(target, type, x, y, extra) {
    const ev = new MouseEvent(type, Object.assign({ bubbles: true, cancelable: true, view: window,
      clientX: x, clientY: y, button: 0, buttons: type === "mouseup" ? 0 : 1 }, extra || {}));
    target.dispatchEvent(ev);
  }

  /* Pixels of a canvas that are not transparent and not white. */
  function inked(canvas) {
    const ctx = canvas.getContext("2d");
    const d = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] < 245 || d[i + 1] < 245 || d[i + 2] < 245)) n++;
    return n;
  }

  function near(a, b, tol) { return Math.abs(a - b) <= tol; }

  function checkSummary(sec, trace, ti) {
    const rows = sec.querySelectorAll("table.summary tbody tr");
    check(rows.length === trace.layouts.length, "trace " + ti + ": one summary row per layout", rows.length);
    trace.layouts.forEach((lay, li) => {
      const r = lay.report, row = rows[li];
      if (!row) return;
      const cell = f => row.querySelector('td[data-field="' + f + '"]');
      for (const f of ["peak_live_bytes", "peak_reserved_bytes", "fit_bytes", "torch_reserved_bytes"]) {
        const c = cell(f);
        let want = r[f];
        if (f === "torch_reserved_bytes" && (want === undefined || want === null) && trace.extra) want = trace.extra[f];
        const text = want === undefined || want === null ? DASH : bytes(want);
        check(c && c.textContent === text, "trace " + ti + " layout " + li + ": " + f + " shows " + text, c && c.textContent);
        check(c && c.getAttribute("data-value") === (want === undefined || want === null ? "" : String(want)),
          "trace " + ti + " layout " + li + ": " + f + " value equals the JSON");
      }
      const ratio = cell("reserved_over_live");
      const wantRatio = r.failed_allocs ? "run failed" : r.reserved_over_live.toFixed(3); /* no figure for a failed run */
      check(ratio && ratio.textContent === wantRatio, "trace " + ti + " layout " + li + ": ratio " + wantRatio, ratio && ratio.textContent);
      const failed = cell("failed_allocs");
      check(failed && failed.getAttribute("data-value") === String(r.failed_allocs), "trace " + ti + " layout " + li + ": failed reservations equal the JSON");
      if (r.first_failure)
        check(failed && failed.textContent.indexOf("(first: ") > 0 && failed.textContent.indexOf(" at event ") > 0,
              "trace " + ti + " layout " + li + ": the first failure is shown", failed && failed.textContent);
      const dev = cell("device_allocs");
      check(dev && dev.textContent.replace(/,/g, "") === r.device_allocs + " / " + r.device_frees, "trace " + ti + " layout " + li + ": device allocs / frees", dev && dev.textContent);
      const dc = cell("driver_calls");
      if (r.driver_calls) {
        const keys = Object.keys(r.driver_calls);
        check(dc && keys.every(k => dc.textContent.indexOf(String(r.driver_calls[k]).replace(/\B(?=(\d{3})+(?!\d))/g, ",")) >= 0),
          "trace " + ti + " layout " + li + ": driver calls by kind shown", dc && dc.textContent);
      } else {
        check(dc && dc.textContent === DASH, "trace " + ti + " layout " + li + ": no driver_calls field shows a dash");
      }
      const dt = cell("driver_time_model");
      if (r.driver_time_model) {
        const m = r.driver_time_model;
        check(dt && dt.textContent.indexOf("(" + m.costs + ")") > 0 &&
              dt.getAttribute("data-value") === JSON.stringify(m),
          "trace " + ti + " layout " + li + ": modelled driver time shown with its cost set", dt && dt.textContent);
      } else {
        check(dt && dt.textContent === DASH, "trace " + ti + " layout " + li + ": no driver_time_model shows a dash");
      }
    });
  }

  function checkBreakdown(sec, v, ti, moment, valuesOf) {
    const cols = sec.querySelectorAll(".bd-layout");
    check(cols.length === v.drawn.length, "trace " + ti + ": one breakdown column per drawn layout (" + moment + ")", cols.length);
    let rowsChecked = 0, splitRows = 0, bad = [];
    cols.forEach(col => {
      const li = Number(col.getAttribute("data-layout"));
      const lay = v.layouts[li];
      const block = col.querySelector('[data-moment="' + moment + '"]');
      if (!block) { bad.push("layout " + li + " has no " + moment + " block"); return; }
      block.querySelectorAll(".bd-row").forEach(row => {
        const j = Number(row.getAttribute("data-pool"));
        const want = valuesOf(lay, j);
        const nums = row.querySelector(".bd-nums");
        const segs = {};
        row.querySelectorAll("[data-segment]").forEach(s => { segs[s.getAttribute("data-segment")] = Number(s.getAttribute("data-bytes")); });
        /* the free rest: split into cached and holes when the pool reports cached bytes */
        const free = Math.max(0, want.reserved - want.in_use - want.padding);
        const split = want.cached !== undefined && want.cached >= 0;
        const cached = split ? Math.min(free, want.cached) : 0;
        const wantSegs = split ? { free: 0, cached: cached, holes: free - cached } : { free: free, cached: 0, holes: 0 };
        if (Number(nums.getAttribute("data-reserved")) !== want.reserved) bad.push("layout " + li + " pool " + j + " reserved");
        if (segs.in_use !== want.in_use || segs.padding !== want.padding || segs.free !== wantSegs.free ||
            segs.cached !== wantSegs.cached || segs.holes !== wantSegs.holes)
          bad.push("layout " + li + " pool " + j + " segments");
        if (segs.in_use + segs.padding + segs.free + segs.cached + segs.holes !== Math.max(want.reserved, want.in_use + want.padding))
          bad.push("layout " + li + " pool " + j + " segments do not add up to what it reserved");
        if (split) splitRows++;
        if (nums.textContent.indexOf("reserved " + bytes(want.reserved)) !== 0) bad.push("layout " + li + " pool " + j + " text '" + nums.textContent + "'");
        rowsChecked++;
      });
    });
    check(rowsChecked > 0 && bad.length === 0, "trace " + ti + ": breakdown " + moment + " bars equal the JSON (" + rowsChecked + " pools, " + splitRows + " with cached and holes apart)", bad.slice(0, 3).join("; "));
    const arenaRows = v.layouts.filter(l => l.pools.some(p => /^arena/.test(p.options))).length;
    if (arenaRows) check(splitRows > 0, "trace " + ti + ": the arena's free rest is split into cached and holes (" + moment + ")", splitRows);
  }

  function run() {
    const T = window.cubemem;
    check(!!(T && T.ready), "the report's script ran");
    if (!T) return;
    const data = JSON.parse(document.getElementById("cubemem-data").textContent);
    check(data.format === "cubemem-report" && Array.isArray(data.traces), "embedded JSON parses");
    const sections = document.querySelectorAll("section.trace");
    check(sections.length === data.traces.length, "one section per trace", sections.length);
    const paint = performance.getEntriesByType("paint");
    for (const p of paint) metric(p.name.replace(/-/g, "_") + "_ms", p.startTime.toFixed(1));
    metric("render_ms", T.timings.render_ms.toFixed(1));
    metric("charts_ready_ms", T.timings.ready_ms.toFixed(1));
    const nav = performance.getEntriesByType("navigation")[0];
    if (nav) metric("dom_content_loaded_ms", nav.domContentLoadedEventEnd.toFixed(1));

    data.traces.forEach((trace, ti) => {
      const sec = sections[ti], v = T.views[ti];
      checkSummary(sec, trace, ti);
      if (!v.base) return;
      const tl = sec.querySelector("canvas.timeline");
      check(tl && tl.width > 0 && inked(tl) > 2000, "trace " + ti + ": timeline drawn", tl && inked(tl));
      const addr = sec.querySelectorAll("canvas.address");
      const withAllocs = trace.layouts.filter(l => l.allocations).length;
      check(addr.length === withAllocs, "trace " + ti + ": one address chart per layout", addr.length);
      addr.forEach((c, k) => {
        check(Number(c.getAttribute("data-drawn")) > 0 && inked(c) > 500, "trace " + ti + ": address chart " + k + " drawn (" + c.getAttribute("data-drawn") + " rectangles)");
      });
      let maxDraw = 0;
      for (const a of v.addr) maxDraw = Math.max(maxDraw, a.drawMs);
      metric("trace" + ti + "_address_draw_ms", maxDraw.toFixed(1));
      checkBreakdown(sec, v, ti, "peak", (lay, j) => lay.peak.pools[j]);

      const lay0 = v.drawn[0], base = lay0.timeline;
      const rect = () => tl.getBoundingClientRect();
      const cy = rect().top + 100;

      /* hover at the peak of the first layout: the readout shows the peak */
      const px = v.xToPx(v.mode === "time" ? lay0.peak.time_us : lay0.peak.event);
      const th = performance.now();
      for (let n = 0; n < 10; n++) mouse(tl, "mousemove", rect().left + px + (n % 2 ? 1 : 0), cy);
      metric("trace" + ti + "_hover_ms", ((performance.now() - th) / 10).toFixed(2));
      mouse(tl, "mousemove", rect().left + px, cy);
      const ro = sec.querySelector(".readout");
      const i = Number(ro.getAttribute("data-sample"));
      check(Number.isInteger(i) && i >= 0 && i < base.reserved.length, "trace " + ti + ": hover picks a sample", i);
      const text = ro.textContent;
      const want = ["live " + bytes(base.live[i]), lay0.label + ": reserved " + bytes(base.reserved[i])];
      if (v.hasTime) want.push("time ");
      lay0.pools.forEach((p, j) => { const b = base.pools[j].reserved[i]; if (b > 0) want.push("pool " + p.index + " " + bytes(b)); });
      const missing = want.filter(w => text.indexOf(w) < 0);
      check(missing.length === 0, "trace " + ti + ": readout shows time, live, reserved and reserved per pool", missing.join(" | "));

      /* click: pick that moment; the breakdown gains a picked block */
      mouse(tl, "mousedown", rect().left + px, cy);
      mouse(window, "mouseup", rect().left + px, cy);
      check(v.picked === i, "trace " + ti + ": a click picks the hovered sample", v.picked);
      checkBreakdown(sec, v, ti, "picked", (lay, j) => ({ reserved: lay.timeline.pools[j].reserved[i], in_use: lay.timeline.pools[j].in_use[i], padding: lay.timeline.pools[j].padding[i],
                                                          cached: lay.timeline.pools[j].cached ? lay.timeline.pools[j].cached[i] : -1 }));

      /* drag from 25 % to 50 % of the plot: zoom to that range */
      const full = v.fullRange();
      const span = full[1] - full[0];
      const xa = full[0] + 0.25 * span, xb = full[0] + 0.5 * span;
      const drawnBefore = v.addr.length ? v.addr[0].drawnCount : 0;
      mouse(tl, "mousedown", rect().left + v.xToPx(xa), cy);
      mouse(window, "mousemove", rect().left + (v.xToPx(xa) + v.xToPx(xb)) / 2, cy);
      mouse(window, "mousemove", rect().left + v.xToPx(xb), cy);
      const tz = performance.now();
      mouse(window, "mouseup", rect().left + v.xToPx(xb), cy);
      metric("trace" + ti + "_zoom_redraw_ms", (performance.now() - tz).toFixed(1));
      check(near(v.view[0], xa, span * 0.01) && near(v.view[1], xb, span * 0.01), "trace " + ti + ": drag zooms to the dragged range", v.view.join(".."));
      if (v.addr.length)
        check(v.addr[0].drawnCount <= drawnBefore, "trace " + ti + ": the address chart follows the zoom", v.addr[0].drawnCount + " <= " + drawnBefore);
      check(inked(tl) > 2000, "trace " + ti + ": zoomed timeline drawn");
      /* hover inside the zoomed view still reads the JSON */
      mouse(tl, "mousemove", rect().left + v.xToPx((xa + xb) / 2), cy);
      const j2 = Number(ro.getAttribute("data-sample"));
      const xs = v.mode === "time" ? base.time_us : base.event;
      check(xs[j2] >= xa - span * 0.01 && ro.textContent.indexOf("live " + bytes(base.live[j2])) >= 0, "trace " + ti + ": hover after zoom reads the zoomed range", j2);
      tl.dispatchEvent(new MouseEvent("dblclick", { bubbles: true, clientX: rect().left + 200, clientY: cy }));
      check(v.view[0] === full[0] && v.view[1] === full[1], "trace " + ti + ": double-click resets the zoom", v.view.join(".."));

      /* the event-order switch */
      const be = sec.querySelector('button[data-mode="event"]'), bt = sec.querySelector('button[data-mode="time"]');
      be.click();
      check(v.mode === "event" && v.view[1] >= trace.events, "trace " + ti + ": switch to event order", v.mode + " " + v.view.join(".."));
      check(be.getAttribute("aria-pressed") === "true", "trace " + ti + ": event-order button pressed");
      /* zoom around the first layout's peak (a few samples wide) and hover
       * just before the peak event: the readout shows the peak */
      const run = base.event.length > 1 ? base.event[1] - base.event[0] : 1;
      v.zoom(lay0.peak.event - 3 * run, lay0.peak.event + 3 * run);
      mouse(tl, "mousemove", rect().left + v.xToPx(lay0.peak.event - 0.5), cy);
      const ip = Number(ro.getAttribute("data-sample"));
      check(base.reserved[ip] === lay0.peak.reserved && ro.textContent.indexOf(lay0.label + ": reserved " + bytes(lay0.peak.reserved)) >= 0,
        "trace " + ti + ": hover at the peak shows the peak", base.reserved[ip] + " vs " + lay0.peak.reserved);
      v.reset();
      if (v.hasTime) { bt.click(); check(v.mode === "time", "trace " + ti + ": back to trace time"); }

      /* hover an allocation: the card shows its numbers */
      v.addr.forEach((av, k) => {
        const A = trace.allocations, L = av.lay.allocations;
        let best = -1;
        for (let n = 0; n < A.size.length; n++) if (L.pool[n] >= 0 && (best < 0 || A.size[n] > A.size[best])) best = n;
        if (best < 0) return;
        av.canvas.scrollIntoView({ block: "center" });
        const pos = av.locate(best);
        check(!!pos, "trace " + ti + " address " + k + ": the largest allocation is on the chart");
        if (!pos) return;
        mouse(av.canvas, "mousemove", pos.x, pos.y);
        if (k === 0) { /* steady-state cost of one hover (hit test + card) */
          const tc = performance.now();
          for (let n = 0; n < 10; n++) mouse(av.canvas, "mousemove", pos.x + (n % 2), pos.y);
          metric("trace" + ti + "_address_hover_ms", ((performance.now() - tc) / 10).toFixed(2));
          mouse(av.canvas, "mousemove", pos.x, pos.y);
        }
        const card = document.getElementById("hovercard");
        const shownAlloc = Number(card.getAttribute("data-alloc"));
        check(!card.hidden && shownAlloc === best, "trace " + ti + " address " + k + ": hover card for the allocation under the pointer", card.hidden + " " + shownAlloc + " vs " + best);
        const size = card.querySelector('[data-key="size"]'), req = card.querySelector('[data-key="requested"]');
        check(size && size.textContent.indexOf(bytes(A.size[best] + L.padding[best])) >= 0 &&
              req && req.textContent.indexOf(bytes(A.size[best])) >= 0,
              "trace " + ti + " address " + k + ": card shows size and requested size", size && size.textContent);
        const pool = card.querySelector('[data-key="pool"]');
        check(pool && pool.textContent.indexOf(av.lay.pools[L.pool[best]].options) >= 0, "trace " + ti + " address " + k + ": card shows the pool");
        const freed = card.querySelector('[data-key="freed at"]');
        check(freed && (A.free_event[best] < 0 ? /never/.test(freed.textContent) : freed.textContent.indexOf(String(A.free_event[best]).replace(/\B(?=(\d{3})+(?!\d))/g, ",")) >= 0),
          "trace " + ti + " address " + k + ": card shows when it was freed");
        if (A.frames && A.frames[best]) check(!!card.querySelector('[data-key="frames"]'), "trace " + ti + " address " + k + ": card shows the stack frames");
      });
      /* the peak labels of the timeline do not overlap */
      const pl = v.peakLabels || [];
      let overlaps = 0;
      for (let p = 0; p < pl.length; p++) for (let q = 0; q < p; q++)
        if (pl[p].x < pl[q].x + pl[q].w && pl[q].x < pl[p].x + pl[p].w && Math.abs(pl[p].y - pl[q].y) < 12) overlaps++;
      check(pl.length === v.drawn.length && overlaps === 0, "trace " + ti + ": one peak label per layout, none overlapping", pl.length + " labels, " + overlaps + " overlaps");
      /* stack frames: said when absent; the note and the tables when present */
      const fnote = sec.querySelector('[data-key="frames-note"]');
      if (v.addr.length) check(fnote && (trace.allocations.frames ? /from the snapshot/.test(fnote.textContent) : /none in this input/.test(fnote.textContent)),
        "trace " + ti + ": the page says whether it has stack frames", fnote && fnote.textContent);
      /* live at the peak: the largest allocations live after the peak event,
       * largest first, and the peak equals the trace's (all drawn) */
      const A = trace.allocations;
      const lt = sec.querySelector('table.live[data-table="peak"]');
      check(!!lt, "trace " + ti + ": a 'live at the peak' table");
      if (lt) {
        const pk = v.peakOfLive();
        if (A.shown === A.total && trace.layouts[0].report)
          check(pk.bytes === trace.layouts[0].report.peak_live_bytes, "trace " + ti + ": the table's peak is the trace's peak of live bytes", pk.bytes + " vs " + trace.layouts[0].report.peak_live_bytes);
        const rows = Array.from(lt.querySelectorAll("tbody tr"));
        const idx = rows.map(r => Number(r.getAttribute("data-alloc")));
        let liveOk = idx.length > 0 && idx.length <= 10, desc = true, sum = 0;
        idx.forEach((i, k) => {
          sum += A.size[i];
          if (!(A.alloc_event[i] <= pk.event && (A.free_event[i] < 0 || A.free_event[i] > pk.event))) liveOk = false;
          if (k && A.size[idx[k - 1]] < A.size[i]) desc = false;
        });
        check(liveOk && desc && sum <= pk.bytes, "trace " + ti + ": the rows are live at the peak, largest first, at most 10", idx.join(","));
        let larger = 0; /* nothing left out is larger than the last row */
        for (let i = 0; i < A.size.length; i++)
          if (A.alloc_event[i] <= pk.event && (A.free_event[i] < 0 || A.free_event[i] > pk.event) && idx.indexOf(i) < 0 && A.size[i] > A.size[idx[idx.length - 1]]) larger++;
        check(larger === 0, "trace " + ti + ": no live allocation left out is larger than the rows", larger);
        check(rows.length && rows[0].querySelector('[data-key="size"]').textContent === bytes(A.size[idx[0]]), "trace " + ti + ": the size column shows the size");
        if (A.frames) {
          const withFrames = rows.filter(r => A.frames[Number(r.getAttribute("data-alloc"))]);
          check(withFrames.every(r => { const sm = r.querySelector("summary"); return sm && sm.textContent.length > 0 && /:\d+ /.test(sm.textContent); }) &&
                rows.filter(r => !A.frames[Number(r.getAttribute("data-alloc"))]).every(r => r.querySelector("td.where").textContent === DASH),
            "trace " + ti + ": each row with a stack names a frame (file:line function), the others a dash", withFrames.length);
        }
        /* clicking a row outlines it in the address views */
        if (rows.length && v.addr.length) {
          rows[0].click();
          check(v.addr.every(av => av.marked === idx[0]), "trace " + ti + ": clicking a row outlines that allocation");
          rows[0].click();
          check(v.addr.every(av => av.marked === -1), "trace " + ti + ": clicking it again removes the outline");
        }
      }
      /* the first failed reservation of each layout that had one */
      trace.layouts.forEach((lay, li) => {
        const L = lay.allocations;
        if (!L) return;
        const failed = L.pool.some(p => p < 0);
        const ft = sec.querySelector('table.live[data-table="failure-' + li + '"]');
        check(failed === !!ft, "trace " + ti + " layout " + li + ": a failure table exactly when a reservation failed", failed + " " + !!ft);
      });
      /* click pins the card: hovering elsewhere keeps it, a second click closes it */
      if (v.addr.length) {
        const av = v.addr[0], L0 = av.lay.allocations;
        let best = -1;
        for (let n = 0; n < A.size.length; n++) if (L0.pool[n] >= 0 && (best < 0 || A.size[n] > A.size[best])) best = n;
        const pos = best >= 0 ? av.locate(best) : null;
        if (pos) {
          const card = document.getElementById("hovercard");
          mouse(av.canvas, "click", pos.x, pos.y);
          check(card.hasAttribute("data-pinned") && !card.hidden && card.getAttribute("data-alloc") === String(best), "trace " + ti + ": a click keeps the allocation's card");
          const r = av.canvas.getBoundingClientRect();
          mouse(av.canvas, "mousemove", r.left + 2, r.top + 2);
          mouse(av.canvas, "mouseleave", r.left + 2, r.top + 2);
          check(!card.hidden && card.getAttribute("data-alloc") === String(best), "trace " + ti + ": the kept card stays while the pointer moves on");
          mouse(av.canvas, "click", pos.x, pos.y);
          check(!card.hasAttribute("data-pinned") && card.hidden, "trace " + ti + ": a second click closes it");
        }
      }
      /* leave the first layout's card and a picked moment visible for the screenshot */
      if (v.addr.length) {
        const av = v.addr[0], A = trace.allocations;
        let best = 0;
        for (let n = 0; n < A.size.length; n++) if (av.lay.allocations.pool[n] >= 0 && A.size[n] > A.size[best]) best = n;
        const pos = av.locate(best);
        if (pos) mouse(av.canvas, "mousemove", pos.x, pos.y);
      }
    });
    window.scrollTo(0, 0);
  }

  function finish() {
    for (const e of errors) { fail++; lines.push("not ok no script errors -- " + e); }
    if (!errors.length) { pass++; lines.push("ok no script errors"); }
    lines.push("SELFTEST pass=" + pass + " fail=" + fail);
    const pre = document.createElement("pre");
    pre.id = "selftest-result";
    pre.textContent = lines.join("\n");
    document.body.appendChild(pre);
    document.title = "SELFTEST " + (fail ? "FAIL" : "PASS");
  }

  window.addEventListener("load", () => {
    try { run(); } catch (e) { errors.push("selftest threw: " + e + (e && e.stack ? " " + e.stack : "")); }
    finish();
  });
})();
