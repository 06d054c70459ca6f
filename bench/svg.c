/*
 * svg.c — the memory timeline of svg.h. Series are scaled to a shared byte axis with "nice"
 * gridlines (1, 2 or 5 × 10^k GB/MB), drawn as polylines; the legend names each series with
 * its peak.
 */
#include <math.h>
#include <stdio.h>

#include "svg.h"

enum { W = 1000, H = 480, ML = 70, MR = 20, MT = 70, MB = 60 };

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

static double nice_step(double range)
{
    double raw = range / 6, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

static void human(double bytes, char *buf, size_t len)
{
    if (bytes == 0)
        snprintf(buf, len, "0");
    else if (bytes >= 1e9)
        snprintf(buf, len, "%.3g GB", bytes / 1e9);
    else
        snprintf(buf, len, "%.3g MB", bytes / 1e6);
}

int svg_write(const char *path, const char *title, const svg_point_t *pts, size_t n, size_t nops,
              int has_detail)
{
    FILE *f = fopen(path, "w");
    uint64_t peak[4] = { 0 }, ymax = 1;
    int nseries = has_detail ? 4 : 2;
    double step, pw = W - ML - MR, ph = H - MT - MB;
    if (f == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < nseries; k++)
            if (value(&pts[i], k) > peak[k])
                peak[k] = value(&pts[i], k);
    for (int k = 0; k < nseries; k++)
        if (peak[k] > ymax)
            ymax = peak[k];
    step = nice_step((double)ymax);
    ymax = (uint64_t)(ceil((double)ymax / step) * step);

    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' "
            "font-family='sans-serif' font-size='12'>\n<rect width='100%%' height='100%%' "
            "fill='white'/>\n<text x='%d' y='22' font-size='15'>%s</text>\n",
            W, H, ML, title);
    for (double y = 0; y <= (double)ymax + 1; y += step) {
        double py = MT + ph - y / (double)ymax * ph;
        char lab[32];
        human(y, lab, sizeof lab);
        fprintf(f,
                "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#ddd'/>"
                "<text x='%d' y='%.1f' text-anchor='end'>%s</text>\n",
                ML, py, W - MR, py, ML - 6, py + 4, lab);
    }
    fprintf(f,
            "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='black'/>\n"
            "<text x='%d' y='%d' text-anchor='middle'>operation (of %zu)</text>\n",
            ML, MT + (int)ph, W - MR, MT + (int)ph, ML + (int)pw / 2, H - 18, nops);
    for (int k = nseries - 1; k >= 0; k--) {
        fprintf(f,
                "<polyline fill='none' stroke='%s' stroke-width='1.5' stroke-dasharray='%s' "
                "points='",
                SERIES[k].color, SERIES[k].dash);
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%.1f,%.1f ", ML + (double)pts[i].op / (double)(nops ? nops : 1) * pw,
                    MT + ph - (double)value(&pts[i], k) / (double)ymax * ph);
        fprintf(f, "'/>\n");
    }
    for (int k = 0; k < nseries; k++) {
        /* Two columns, two rows: long labels never collide. */
        int x = ML + 10 + (k % 2) * 430, y = MT - 24 + (k / 2) * 16;
        char lab[32];
        human((double)peak[k], lab, sizeof lab);
        fprintf(f,
                "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='%s' stroke-width='3' "
                "stroke-dasharray='%s'/><text x='%d' y='%d'>%s, peak %s</text>\n",
                x, y, x + 24, y, SERIES[k].color, SERIES[k].dash, x + 30, y + 4, SERIES[k].name,
                lab);
    }
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? 0 : -1;
}
