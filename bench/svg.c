/*
 * svg.c — the memory timeline of svg.h. Each panel scales its own series to "nice" gridlines
 * (1, 2 or 5 × 10^k bytes); the shared x axis gets nice ticks in operations (1, 2 or 5 × 10^k)
 * with labels under the lowest panel. Series are polylines; the legend names each with its peak.
 *
 *   title
 *   legend: live, device, free
 *   +-- physical memory (bytes) ----------+
 *   |                                     |
 *   +-------------------------------------+
 *   +-- VA holes (virtual bytes) ---------+   only with detail (vpmm backends)
 *   +-------------------------------------+
 *   0      200k     400k    ...   operation (of N)
 */
#include <math.h>
#include <stdio.h>

#include "escape.h"
#include "svg.h"

enum {
    W = 1000,
    ML = 80, /* left margin: the y labels */
    MR = 20,
    P1_TOP = 84, /* physical panel */
    P1_H = 320,
    P2_GAP = 52, /* between the panels: room for the second panel's heading */
    P2_H = 120,  /* VA-holes panel */
    MB = 52,     /* x labels and the axis title */
};

typedef struct series {
    const char *name;
    const char *color;
    const char *dash;
} series_t;

static const series_t SERIES[4] = {
    { "live (allocated)", "#1f77b4", "" },
    { "device (mapped)", "#d62728", "" },
    { "free (mapped, unused)", "#2ca02c", "" },
    { "VA holes between regions", "#7f7f7f", "6,4" },
};

typedef struct panel {
    double top, h;
    double ymax, step; /* bytes */
    double unit;       /* the labels' unit, in bytes (KiB .. TiB) */
} panel_t;

static uint64_t value(const svg_point_t *p, int k)
{
    switch (k) {
    case 0:
        return p->s.live;
    case 1:
        return p->s.device;
    case 2:
        return p->s.free;
    default:
        return p->s.holes;
    }
}

/* A step of 1, 2 or 5 × 10^k that cuts range into about `parts` parts. */
static double nice_step(double range, double parts)
{
    double raw = range / parts, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

/* The byte unit of an axis whose top is `top` (the library's units: powers of 1024). */
static double axis_unit(double top)
{
    double u = 1024.0;
    while (top >= 1024.0 * u && u < 1099511627776.0)
        u *= 1024.0;
    return u;
}

static void human_bytes(double bytes, double unit, char *buf, size_t len)
{
    const char *name = unit >= 1099511627776.0 ? "TiB"
                       : unit >= 1073741824.0  ? "GiB"
                       : unit >= 1048576.0     ? "MiB"
                                               : "KiB";
    if (bytes == 0)
        snprintf(buf, len, "0");
    else
        snprintf(buf, len, "%.3g %s", bytes / unit, name);
}

static void human_count(double n, char *buf, size_t len)
{
    if (n >= 1e9)
        snprintf(buf, len, "%gG", n / 1e9);
    else if (n >= 1e6)
        snprintf(buf, len, "%gM", n / 1e6);
    else if (n >= 1e3)
        snprintf(buf, len, "%gk", n / 1e3);
    else
        snprintf(buf, len, "%g", n);
}

static void panel_scale(panel_t *p, uint64_t peak)
{
    double top = peak < 1048576 ? 1048576.0 : (double)peak; /* an empty series gets an axis */
    /* Steps of 1, 2 or 5 x 10^k in the axis's unit (MiB, GiB): round labels in that unit. */
    p->unit = axis_unit(top);
    p->step = nice_step(top / p->unit, 6) * p->unit;
    p->ymax = ceil(top / p->step) * p->step;
}

static double panel_y(const panel_t *p, double bytes)
{
    return p->top + p->h - bytes / p->ymax * p->h;
}

static double plot_x(size_t op, size_t nops)
{
    return ML + (double)op / (double)(nops ? nops : 1) * (W - ML - MR);
}

/* Horizontal gridlines with byte labels, vertical gridlines at the x ticks, the frame and the
 * panel's heading (escaped). */
static void draw_panel(FILE *f, const panel_t *p, const char *heading, size_t nops, double xstep)
{
    char lab[32];
    for (int i = 0;; i++) {
        double y = i * p->step;
        if (y > p->ymax * (1 + 1e-9))
            break;
        human_bytes(y, p->unit, lab, sizeof lab);
        fprintf(f,
                "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#ddd'/>"
                "<text x='%d' y='%.1f' text-anchor='end'>%s</text>\n",
                ML, panel_y(p, y), W - MR, panel_y(p, y), ML - 6, panel_y(p, y) + 4, lab);
    }
    for (int i = 1;; i++) {
        double x = i * xstep;
        if (x > (double)nops)
            break;
        fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#eee'/>\n",
                plot_x((size_t)x, nops), p->top, plot_x((size_t)x, nops), p->top + p->h);
    }
    fprintf(f,
            "<rect x='%d' y='%.1f' width='%d' height='%.1f' fill='none' stroke='black'/>\n"
            "<text x='%d' y='%.1f' font-weight='bold'>",
            ML, p->top, W - ML - MR, p->h, ML, p->top - 8);
    esc_xml_text(f, heading);
    fprintf(f, "</text>\n");
}

/* Tick marks and labels of the x axis under the panel p, and the axis title. */
static void draw_x_axis(FILE *f, const panel_t *p, size_t nops, double xstep)
{
    const double y = p->top + p->h;
    char lab[32], title[64];
    for (int i = 0;; i++) {
        double x = i * xstep;
        if (x > (double)nops)
            break;
        human_count(x, lab, sizeof lab);
        fprintf(f,
                "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='black'/>"
                "<text x='%.1f' y='%.1f' text-anchor='middle'>%s</text>\n",
                plot_x((size_t)x, nops), y, plot_x((size_t)x, nops), y + 5, plot_x((size_t)x, nops),
                y + 18, lab);
    }
    snprintf(title, sizeof title, "operation (of %zu)", nops);
    fprintf(f, "<text x='%d' y='%.1f' text-anchor='middle'>", ML + (W - ML - MR) / 2, y + 40);
    esc_xml_text(f, title);
    fprintf(f, "</text>\n");
}

static void draw_series(FILE *f, const panel_t *p, const svg_point_t *pts, size_t n, size_t nops,
                        int k)
{
    fprintf(f,
            "<polyline fill='none' stroke='%s' stroke-width='1.5' stroke-dasharray='%s' "
            "points='",
            SERIES[k].color, SERIES[k].dash);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%.1f,%.1f ", plot_x(pts[i].op, nops), panel_y(p, (double)value(&pts[i], k)));
    fprintf(f, "'/>\n");
}

static void draw_legend(FILE *f, int k, int x, int y, uint64_t peak)
{
    char lab[32];
    human_bytes((double)peak, axis_unit((double)peak), lab, sizeof lab);
    fprintf(f,
            "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='%s' stroke-width='3' "
            "stroke-dasharray='%s'/><text x='%d' y='%d'>",
            x, y, x + 24, y, SERIES[k].color, SERIES[k].dash, x + 30, y + 4);
    esc_xml_text(f, SERIES[k].name);
    fprintf(f, ", peak %s</text>\n", lab);
}

int svg_write(FILE *f, const char *title, const svg_point_t *pts, size_t n, size_t nops,
              int has_detail)
{
    uint64_t peak[4] = { 0 }, ymax;
    const int nphys = has_detail ? 3 : 2;
    panel_t phys = { P1_TOP, P1_H, 0, 0, 0 }, virt = { P1_TOP + P1_H + P2_GAP, P2_H, 0, 0, 0 };
    const panel_t *lowest = has_detail ? &virt : &phys;
    const int h = (int)(lowest->top + lowest->h) + MB;
    double xstep = nice_step((double)(nops ? nops : 1), 8);

    if (xstep < 1)
        xstep = 1;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++)
            if (value(&pts[i], k) > peak[k])
                peak[k] = value(&pts[i], k);
    ymax = peak[0];
    for (int k = 1; k < nphys; k++)
        if (peak[k] > ymax)
            ymax = peak[k];
    panel_scale(&phys, ymax);
    panel_scale(&virt, peak[3]);

    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' "
            "font-family='sans-serif' font-size='12'>\n<rect width='100%%' height='100%%' "
            "fill='white'/>\n<text x='%d' y='24' font-size='15'>",
            W, h, ML);
    esc_xml_text(f, title);
    fprintf(f, "</text>\n");

    draw_panel(f, &phys, "physical memory: bytes on the device", nops, xstep);
    for (int k = nphys - 1; k >= 0; k--)
        draw_series(f, &phys, pts, n, nops, k);
    for (int k = 0; k < nphys; k++) /* one row: the labels are short enough */
        draw_legend(f, k, ML + 10 + k * 300, 50, peak[k]);
    if (has_detail) {
        draw_panel(f, &virt, "virtual address space: VA holes (reserved, no memory)", nops, xstep);
        draw_series(f, &virt, pts, n, nops, 3);
        draw_legend(f, 3, ML + 450, (int)virt.top - 12, peak[3]);
    }
    draw_x_axis(f, lowest, nops, xstep);
    fprintf(f, "</svg>\n");
    return ferror(f) ? -1 : 0;
}
