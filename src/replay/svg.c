/*
 * svg.c - render replay results as one standalone SVG document.
 *
 * Layout. One panel per trace, stacked vertically. A panel has a title, a
 * timeline chart (x: events replayed, y: bytes with decimal units as in
 * cm_format_bytes) showing the trace's live bytes as a filled area and each
 * series' reserved bytes as a line, a legend with the peaks, and a per-pool
 * breakdown: one horizontal stacked bar per series of the bytes each pool had
 * reserved when the storage peak was first reached (pool_reserved_at_peak;
 * falls back to the per-pool peaks when there is no snapshot).
 *
 * The document is built in a growable buffer (string builder with vsnprintf)
 * and handed to the caller's write callback in one call at the end; nothing
 * is printed. Axis ticks are "nice" numbers (1, 2, 2.5, 5 x 10^k).
 *
 * Exports cm_replay_svg.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cubemem/replay.h"
#include "base/sbuf.h"


/* Text from names (file names: any bytes) as well-formed XML. */
static void sb_escaped(cm__sbuf *b, const char *s) { cm__sb_xml_text(b, s); }

static const char *const k_colors[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd",
                                       "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
static const char *const k_pool_colors[] = {
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295"};

/* A nice tick step giving about `want` intervals over [0, max]. */
static double nice_step(double max, int want) {
  if (max <= 0) return 1;
  double raw = max / want, mag = pow(10, floor(log10(raw))), f = raw / mag;
  double nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10;
  return nf * mag;
}

/* Decimal byte units (as cm_format_bytes): unit chosen from the axis maximum. */
static void byte_unit(double max, double *div, const char **name) {
  static const char *const names[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int e = 0;
  double d = 1;
  while (e < 5 && max >= d * 1000) d *= 1000, e++;
  *div = d;
  *name = names[e];
}

static void fmt_num(char *buf, size_t cap, double v) {
  if (fabs(v - round(v)) < 1e-9) snprintf(buf, cap, "%.0f", v);
  else if (fabs(v * 10 - round(v * 10)) < 1e-6) snprintf(buf, cap, "%.1f", v);
  else snprintf(buf, cap, "%.2f", v);
}

static void fmt_count(char *buf, size_t cap, double v) {
  char n[20];
  if (v >= 1e6) fmt_num(n, sizeof n, v / 1e6), snprintf(buf, cap, "%sM", n);
  else if (v >= 1e3) fmt_num(n, sizeof n, v / 1e3), snprintf(buf, cap, "%sk", n);
  else fmt_num(buf, cap, v);
}

static uint64_t pool_value(const cm_replay_result_t *r, size_t j) {
  if (r->pool_reserved_at_peak) return r->pool_reserved_at_peak[j];
  return r->pool_reports ? r->pool_reports[j].bytes_reserved_peak : 0;
}

static void pool_label(const cm_replay_result_t *r, size_t j, char *buf, size_t cap) {
  if (j == r->pool_count) {
    snprintf(buf, cap, "persistent");
    return;
  }
  char desc[128];
  size_t k = cm_pools_format(&r->pool_reports[j].options, 1, desc, sizeof desc);
  if (k == 0) snprintf(desc, sizeof desc, "kind %d", (int)r->pool_reports[j].options.kind);
  snprintf(buf, cap, "pool %zu %s", j, desc);
}

#define W 1000.0
#define PLOT_X0 100.0
#define PLOT_X1 700.0
#define PLOT_H 280.0

/* Scales of a panel's timeline chart: plot top and bottom, axis maxima and
 * tick steps, the byte unit of the y axis. */
typedef struct chart {
  double top, bot;
  double xtop, xstep, ytop, ystep;
  double div;
  const char *unit;
} chart_t;

/* x of event count v on the chart. */
static double chart_x(const chart_t *c, double v) {
  return PLOT_X0 + (PLOT_X1 - PLOT_X0) * (v / c->xtop);
}

/* y of byte count v on the chart. */
static double chart_y(const chart_t *c, double v) { return c->bot - PLOT_H * (v / c->ytop); }

/* The chart's scales from the largest event count and byte count of any series. */
static void chart_scales(const cm_replay_panel_t *p, double y, chart_t *c) {
  uint64_t xmax = 1, ymax = 1;
  for (size_t s = 0; s < p->series_count; s++) {
    const cm_replay_result_t *r = p->series[s].result;
    if (!r) continue;
    if (r->events > xmax) xmax = r->events;
    if (r->peak_live_bytes > ymax) ymax = r->peak_live_bytes;
    if (r->peak_reserved_bytes > ymax) ymax = r->peak_reserved_bytes;
  }
  c->ystep = nice_step((double)ymax * 1.05, 5);
  c->ytop = ceil((double)ymax * 1.05 / c->ystep) * c->ystep;
  c->xstep = nice_step((double)xmax, 8);
  c->xtop = (double)xmax;
  byte_unit(c->ytop, &c->div, &c->unit);
  c->top = y + 40;
  c->bot = c->top + PLOT_H;
}

/* Grid lines, ticks and axis labels of the chart. */
static void chart_axes(cm__sbuf *b, const chart_t *c) {
  cm__sb_printf(b, "<g class=\"axis\">\n");
  for (double v = 0; v <= c->ytop + c->ystep / 2; v += c->ystep) {
    char num[32];
    fmt_num(num, sizeof num, v / c->div);
    cm__sb_printf(b,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>"
              "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s %s</text>\n",
              PLOT_X0, chart_y(c, v), PLOT_X1, chart_y(c, v), PLOT_X0 - 6, chart_y(c, v) + 4, num,
              c->unit);
  }
  for (double v = 0; v <= c->xtop + 1e-9; v += c->xstep) {
    char num[32];
    fmt_count(num, sizeof num, v);
    cm__sb_printf(b,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
              "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
              chart_x(c, v), c->bot, chart_x(c, v), c->bot + 5, chart_x(c, v), c->bot + 18, num);
  }
  cm__sb_printf(b,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
            PLOT_X0, c->top, PLOT_X0, c->bot, PLOT_X0, c->bot, PLOT_X1, c->bot);
  cm__sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"label\">"
            "events replayed (allocations + frees)</text>\n", (PLOT_X0 + PLOT_X1) / 2,
            c->bot + 36);
  cm__sb_printf(b, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\" "
            "class=\"label\">memory (%s, 1 %s = %.0f bytes)</text>\n",
            24.0, (c->top + c->bot) / 2, c->unit, c->unit, c->div);
  cm__sb_printf(b, "</g>\n");
}

/* The live-bytes area (from the first series with a timeline) and one
 * reserved-bytes line per series (dashed at the peak without a timeline). */
static void chart_series(cm__sbuf *b, const cm_replay_panel_t *p, const chart_t *c) {
  const cm_replay_result_t *lr = NULL;
  for (size_t s = 0; s < p->series_count && !lr; s++)
    if (p->series[s].result && p->series[s].result->timeline_count) lr = p->series[s].result;
  if (lr) {
    cm__sb_printf(b, "<path class=\"live\" d=\"M%.1f %.1f", chart_x(c, 0), chart_y(c, 0));
    for (size_t i = 0; i < lr->timeline_count; i++)
      cm__sb_printf(b, " L%.1f %.1f", chart_x(c, (double)lr->timeline[i].event),
                chart_y(c, (double)lr->timeline[i].live_bytes));
    cm__sb_printf(b, " L%.1f %.1f Z\"/>\n",
              chart_x(c, (double)lr->timeline[lr->timeline_count - 1].event), chart_y(c, 0));
  }
  for (size_t s = 0; s < p->series_count; s++) {
    const cm_replay_result_t *r = p->series[s].result;
    if (!r) continue;
    const char *col = k_colors[s % (sizeof k_colors / sizeof k_colors[0])];
    if (r->timeline_count) {
      cm__sb_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", col);
      for (size_t i = 0; i < r->timeline_count; i++)
        cm__sb_printf(b, "%s%.1f,%.1f", i ? " " : "", chart_x(c, (double)r->timeline[i].event),
                  chart_y(c, (double)r->timeline[i].reserved_bytes));
      cm__sb_printf(b, "\"/>\n");
    } else {
      cm__sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-dasharray=\"6 4\"/>\n", PLOT_X0, chart_y(c, (double)r->peak_reserved_bytes),
                PLOT_X1, chart_y(c, (double)r->peak_reserved_bytes), col);
    }
  }
}

/* The legend right of the chart: the live peak, then each series' reserved peak. */
static void chart_legend(cm__sbuf *b, const cm_replay_panel_t *p, const chart_t *c) {
  double ly = c->top + 8;
  char v1[32], v2[32];
  if (p->series_count && p->series[0].result) {
    cm_format_bytes(p->series[0].result->peak_live_bytes, v1, sizeof v1);
    cm__sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" class=\"live\"/>"
              "<text x=\"%.1f\" y=\"%.1f\">live (trace), peak %s</text>\n",
              PLOT_X1 + 16, ly, PLOT_X1 + 36, ly + 9, v1);
    ly += 20;
  }
  for (size_t s = 0; s < p->series_count; s++) {
    const cm_replay_result_t *r = p->series[s].result;
    if (!r) continue;
    const char *col = k_colors[s % (sizeof k_colors / sizeof k_colors[0])];
    cm_format_bytes(r->peak_reserved_bytes, v2, sizeof v2);
    double ratio = r->peak_live_bytes ? (double)r->peak_reserved_bytes / (double)r->peak_live_bytes : 0;
    cm__sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
              "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\">",
              PLOT_X1 + 16, ly + 5, PLOT_X1 + 30, ly + 5, col, PLOT_X1 + 36, ly + 9);
    sb_escaped(b, p->series[s].label ? p->series[s].label : "layout");
    cm__sb_printf(b, "</text><text x=\"%.1f\" y=\"%.1f\" class=\"small\">reserved, peak %s (x%.3f)</text>\n",
              PLOT_X1 + 36, ly + 22, v2, ratio);
    ly += 36;
  }
}

/* Sum of the bytes the breakdown shows for a series (every pool, persistent included). */
static uint64_t pools_total(const cm_replay_result_t *r) {
  uint64_t tot = 0;
  for (size_t j = 0; j <= r->pool_count && r->pool_reports; j++) tot += pool_value(r, j);
  return tot;
}

/* x of byte count v on the breakdown's bars (btop bytes span the plot). */
static double bar_x(double btop, double v) {
  return PLOT_X0 + (PLOT_X1 - PLOT_X0) * (v / btop);
}

/* A legend line under a bar: where the next item goes. */
typedef struct bar_legend {
  double lx, leg_y;
  int shown, hidden;
} bar_legend_t;

/* One pool's legend item under the bar (pools of >= 1% of the bar, 8 at
 * most; the others are counted as hidden). */
static void bar_legend_item(cm__sbuf *b, bar_legend_t *lg, const char *col, const char *desc,
                            const char *vb, uint64_t v, uint64_t tot) {
  if (lg->shown >= 8 || (double)v < 0.01 * (double)tot) {
    lg->hidden++;
    return;
  }
  char item[200];
  snprintf(item, sizeof item, "%s: %s", desc, vb);
  double wdt = 6.0 * (double)strlen(item) + 24;
  if (lg->lx > PLOT_X0 && lg->lx + wdt > W - 10) {
    lg->lx = PLOT_X0;
    lg->leg_y += 14;
  }
  cm__sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"9\" height=\"9\" fill=\"%s\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" class=\"small\">", lg->lx, lg->leg_y, col, lg->lx + 12,
            lg->leg_y + 8);
  sb_escaped(b, item);
  cm__sb_printf(b, "</text>\n");
  lg->lx += wdt;
  lg->shown++;
}

/* The stacked bar of series s at height by, with its label, segments,
 * legend and total. Returns the y below it. */
static double bar_row(cm__sbuf *b, const cm_replay_panel_t *p, size_t s, double by, double btop) {
  const cm_replay_result_t *r = p->series[s].result;
  cm__sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", PLOT_X0 - 6, by + 14);
  char lab[24];
  snprintf(lab, sizeof lab, "%s", p->series[s].label ? p->series[s].label : "layout");
  if (p->series[s].label && strlen(p->series[s].label) > 15) {
    size_t cut = 12; /* not inside a UTF-8 character */
    while (cut > 0 && ((unsigned char)lab[cut] & 0xc0) == 0x80) cut--;
    strcpy(lab + cut, "...");
  }
  sb_escaped(b, lab);
  cm__sb_printf(b, "</text>\n");
  uint64_t tot = pools_total(r);
  double x = 0, bar_y = by;
  bar_legend_t lg = {PLOT_X0, by + 26, 0, 0};
  for (size_t j = 0; j <= r->pool_count && r->pool_reports; j++) {
    uint64_t v = pool_value(r, j);
    if (!v) continue;
    const char *col = k_pool_colors[j % (sizeof k_pool_colors / sizeof k_pool_colors[0])];
    char desc[160], vb[32];
    pool_label(r, j, desc, sizeof desc);
    cm_format_bytes(v, vb, sizeof vb);
    double x0 = bar_x(btop, x), x1 = bar_x(btop, x + (double)v);
    cm__sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"20\" fill=\"%s\" "
              "stroke=\"#fff\" stroke-width=\"0.5\"><title>", x0, bar_y, x1 - x0, col);
    sb_escaped(b, desc);
    cm__sb_printf(b, ": %s</title></rect>\n", vb);
    if (x1 - x0 > 28)
      cm__sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"inbar\">p%zu</text>\n",
                (x0 + x1) / 2, bar_y + 14, j);
    x += (double)v;
    bar_legend_item(b, &lg, col, desc, vb, v, tot);
  }
  if (lg.hidden) {
    if (lg.lx > PLOT_X0 && lg.lx + 150 > W - 10) {
      lg.lx = PLOT_X0;
      lg.leg_y += 14;
    }
    cm__sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"small\">+%d smaller pool%s</text>\n",
              lg.lx, lg.leg_y + 8, lg.hidden, lg.hidden == 1 ? "" : "s");
  }
  char tb[32];
  cm_format_bytes(tot, tb, sizeof tb);
  cm__sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", bar_x(btop, x) + 6, bar_y + 14, tb);
  return lg.leg_y + 24;
}

/* The per-pool breakdown at the storage peak, starting at height by: a
 * title, one bar per series and the bytes axis. Returns the y below it. */
static double breakdown(cm__sbuf *b, const cm_replay_panel_t *p, double by) {
  cm__sb_printf(b, "<text x=\"%.0f\" y=\"%.1f\" class=\"label\">reserved per pool when the device "
            "peak was reached</text>\n", PLOT_X0, by);
  by += 12;
  uint64_t bmax = 1;
  for (size_t s = 0; s < p->series_count; s++) {
    const cm_replay_result_t *r = p->series[s].result;
    if (!r) continue;
    uint64_t tot = pools_total(r);
    if (tot > bmax) bmax = tot;
  }
  double bstep = nice_step((double)bmax, 5), btop = ceil((double)bmax / bstep) * bstep;
  double bdiv;
  const char *bunit;
  byte_unit(btop, &bdiv, &bunit);
  for (size_t s = 0; s < p->series_count; s++)
    if (p->series[s].result) by = bar_row(b, p, s, by, btop);
  /* bytes axis for the bars */
  cm__sb_printf(b, "<g class=\"axis\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
            PLOT_X0, by, PLOT_X1, by);
  for (double v = 0; v <= btop + bstep / 2; v += bstep) {
    char num[32];
    fmt_num(num, sizeof num, v / bdiv);
    cm__sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
              "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s %s</text>\n",
              bar_x(btop, v), by, bar_x(btop, v), by + 5, bar_x(btop, v), by + 18, num, bunit);
  }
  cm__sb_printf(b, "</g>\n");
  return by;
}

/* One trace's panel at height y: title, timeline chart, legend and per-pool
 * breakdown. Returns the y where the next panel starts. */
static double panel(cm__sbuf *b, const cm_replay_panel_t *p, double y) {
  chart_t c;
  chart_scales(p, y, &c);
  cm__sb_printf(b, "<text x=\"%.0f\" y=\"%.1f\" class=\"title\">", PLOT_X0, y + 22);
  sb_escaped(b, p->title ? p->title : "trace");
  cm__sb_printf(b, "</text>\n");
  chart_axes(b, &c);
  chart_series(b, p, &c);
  chart_legend(b, p, &c);
  double by = breakdown(b, p, c.bot + 60);
  return by + 40;
}

int cm_replay_svg(const cm_replay_panel_t *panels, size_t panel_count, cm_replay_write_fn write,
                  void *arg) {
  if ((!panels && panel_count) || !write) return CM_EINVAL;
  cm__sbuf body = {0}, doc = {0};
  double y = 10;
  for (size_t i = 0; i < panel_count; i++) y = panel(&body, &panels[i], y);
  cm__sb_printf(&doc,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"Helvetica, Arial, sans-serif\" "
            "font-size=\"11\">\n"
            "<style>.title{font-size:15px;font-weight:bold}.label{font-size:12px}"
            ".small{font-size:10px;fill:#333}.inbar{font-size:10px;fill:#fff}"
            ".axis line{stroke:#444;stroke-width:1}.axis .grid{stroke:#ddd}"
            ".live{fill:#9aa5b1;fill-opacity:0.55;stroke:#52606d;stroke-width:1}</style>\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            W, y, W, y);
  int rc = CM_OK;
  if (body.oom || doc.oom) rc = CM_ENOMEM;
  else if (write(arg, doc.p, doc.n) || (body.n && write(arg, body.p, body.n)) ||
           write(arg, "</svg>\n", 7))
    rc = CM_EIO;
  free(body.p);
  free(doc.p);
  return rc;
}
