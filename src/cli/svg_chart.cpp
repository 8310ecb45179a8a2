#include "cli/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/check.h"

namespace fp8rl::cli {

namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr int kLeft = 64, kRight = 22, kTop = 10, kBottom = 34;

struct Bucket {
  double sum_x = 0, sum_y = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  size_t finite = 0, seen = 0;
};

std::string tick_label(double v, double spacing) {
  if (std::abs(v) < spacing * 1e-9) v = 0;  // 0.1 + 0.2 - 0.3 is not 0
  return fmt::format("{:.6g}", v);
}

// Data coordinates -> SVG pixels.
struct Frame {
  double x0, x1, y0, y1;
  double left, top, width, height;
  double px(double x) const { return left + (x - x0) / (x1 - x0) * width; }
  double py(double y) const { return top + (1.0 - (y - y0) / (y1 - y0)) * height; }
};

}  // namespace

std::vector<std::vector<ChartPoint>> reduce_series(const std::vector<double>& x,
                                                   const std::vector<double>& y,
                                                   size_t max_points) {
  CHECK(x.size() == y.size(), "reduce_series: {} steps but {} values", x.size(), y.size());
  CHECK(max_points > 0, "reduce_series: max_points must be positive");
  std::vector<std::vector<ChartPoint>> runs;
  std::vector<ChartPoint> run;
  const auto end_run = [&] {
    if (!run.empty()) runs.push_back(std::move(run));
    run.clear();
  };
  if (x.size() <= max_points) {
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isfinite(x[i]) && std::isfinite(y[i]))
        run.push_back({x[i], y[i], y[i], y[i]});
      else
        end_run();
    }
    end_run();
    return runs;
  }
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : x)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(lo <= hi)) return runs;  // no finite step at all
  std::vector<Bucket> buckets(max_points);
  const double span = hi - lo;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) continue;
    const size_t b =
        span > 0 ? std::min(max_points - 1, size_t((x[i] - lo) / span * double(max_points))) : 0;
    Bucket& k = buckets[b];
    ++k.seen;
    if (!std::isfinite(y[i])) continue;
    k.sum_x += x[i];
    k.sum_y += y[i];
    k.min = std::min(k.min, y[i]);
    k.max = std::max(k.max, y[i]);
    ++k.finite;
  }
  for (const Bucket& k : buckets) {
    if (k.seen == 0) continue;  // no step falls here: the line goes on over it
    if (k.finite == 0) {        // steps without a value: a gap
      end_run();
      continue;
    }
    const double n = double(k.finite);
    run.push_back({k.sum_x / n, k.sum_y / n, k.min, k.max});
  }
  end_run();
  return runs;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  CHECK(std::isfinite(lo) && std::isfinite(hi) && hi > lo && target > 0,
        "nice_ticks: bad range [{}, {}]", lo, hi);
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  const double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * magnitude;
  // The slack keeps a bound that is a tick (1.8 / 0.1 = 18.000000000000004) from adding one.
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  // Beyond 2^53 k + 1 == k: a range far narrower than its magnitude gets its ends as ticks.
  if (!std::isfinite(step) || step <= 0 || !(std::abs(first) < 0x1p52) ||
      !(std::abs(last) < 0x1p52) || last - first > 4.0 * target)
    return {lo, hi};
  std::vector<double> ticks;
  for (double k = first; k <= last + 0.5; k += 1) ticks.push_back(k * step);
  return ticks;
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        if ((static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
          out += "\xEF\xBF\xBD";  // U+FFFD
        else
          out += c;
    }
  }
  return out;
}

const char* series_dash(size_t i) {
  // Solid first, then patterns that differ in dash length, gap or rhythm.
  static constexpr const char* kDashes[kDashPatterns] = {
      "", "8,4", "2,4", "12,4,2,4", "5,5", "1,5", "16,5", "8,3,2,3,2,3", "3,8", "12,2,2,2"};
  return kDashes[i % kDashPatterns];
}

namespace {

// The marker of a chart's m-th series with its own steps, centred on (x, y). Shapes take turns,
// and every other one is hollow: two series on the same points show both (a filled circle
// inside a hollow square).
std::string marker(size_t m, double x, double y, const char* color) {
  const std::string paint =
      m % 2 == 0 ? fmt::format("fill=\"{}\"", color)
                 : fmt::format("fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"", color);
  switch (m % 4) {
    case 0:
      return fmt::format("<circle class=\"marker\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.2\" {}/>", x,
                         y, paint);
    case 1:
      return fmt::format(
          "<rect class=\"marker\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"9\" height=\"9\" {}/>", x - 4.5,
          y - 4.5, paint);
    case 2:
      return fmt::format(
          "<path class=\"marker\" d=\"M{:.1f},{:.1f}L{:.1f},{:.1f}L{:.1f},{:.1f}Z\" {}/>", x, y - 4,
          x + 3.8, y + 2.4, x - 3.8, y + 2.4, paint);
    default:
      return fmt::format(
          "<path class=\"marker\" d=\"M{:.1f},{:.1f}L{:.1f},{:.1f}L{:.1f},{:.1f}L{:.1f},{:.1f}Z\" "
          "{}/>",
          x, y - 6, x + 6, y, x, y + 6, x - 6, y, paint);
  }
}

const char* series_color(size_t i) {
  return kPalette[i % std::size(kPalette)];
}

// The first series is drawn wider: a dashed series over it leaves it visible in the gaps.
double series_width(size_t i) {
  return i == 0 ? 2.8 : 1.6;
}

std::string dash_attribute(size_t i) {
  const char* dash = series_dash(i);
  return *dash ? fmt::format(" stroke-dasharray=\"{}\"", dash) : std::string();
}

// The legend's sample of series i: a stretch of its line, with its marker (the m-th) where it
// has one.
std::string legend_key(size_t i, std::optional<size_t> m) {
  const char* color = series_color(i);
  return fmt::format(
      "<svg class=\"key\" viewBox=\"0 0 34 14\" width=\"34\" height=\"14\" aria-hidden=\"true\">"
      "<line x1=\"1\" y1=\"7\" x2=\"33\" y2=\"7\" stroke=\"{}\" stroke-width=\"{}\"{}/>{}</svg>",
      color, series_width(i), dash_attribute(i), m ? marker(*m, 17, 7, color) : "");
}

// The marker ordinal of each series: its place among the series with their own steps.
std::vector<std::optional<size_t>> marker_ordinals(const Chart& chart) {
  std::vector<std::optional<size_t>> out;
  size_t m = 0;
  for (const ChartSeries& s : chart.series)
    out.push_back(s.x.empty() ? std::nullopt : std::optional<size_t>(m++));
  return out;
}

}  // namespace

std::string render_chart(const Chart& chart, const ChartLayout& layout) {
  std::string html =
      fmt::format("<figure class=\"chart\"><figcaption>{}{}</figcaption>", html_escape(chart.title),
                  chart.unit.empty() ? "" : " (" + html_escape(chart.unit) + ")");
  std::vector<std::vector<std::vector<ChartPoint>>> reduced;
  double ylo = std::numeric_limits<double>::infinity(), yhi = -ylo;
  double xlo = ylo, xhi = yhi;
  for (const ChartSeries& s : chart.series) {
    reduced.push_back(reduce_series(s.x.empty() ? chart.x : s.x, s.y, layout.max_points));
    for (const auto& run : reduced.back())
      for (const ChartPoint& p : run) {
        ylo = std::min(ylo, p.min), yhi = std::max(yhi, p.max);
        xlo = std::min(xlo, p.x), xhi = std::max(xhi, p.x);
      }
  }
  const std::vector<std::optional<size_t>> ordinal = marker_ordinals(chart);
  html += "<div class=\"legend\">";
  for (size_t i = 0; i < chart.series.size(); ++i)
    html +=
        fmt::format("<span>{}{}{}</span>", legend_key(i, ordinal[i]),
                    html_escape(chart.series[i].label), reduced[i].empty() ? " (no values)" : "");
  html += "</div>";
  if (!(ylo <= yhi)) return html + "<p class=\"note\">no finite values</p></figure>";
  for (double v : chart.x)
    if (std::isfinite(v)) xlo = std::min(xlo, v), xhi = std::max(xhi, v);
  if (xlo == xhi) xlo -= 1, xhi += 1;  // one step: centred
  if (!std::isfinite(yhi - ylo))
    return html + "<p class=\"note\">values beyond the range of a chart</p></figure>";
  // A constant (or one that varies only in its last digits): a band around it.
  if (yhi - ylo <= 1e-12 * std::max(std::abs(ylo), std::abs(yhi))) {
    const double d = ylo != 0 ? std::abs(ylo) * 0.1 : 1.0;
    ylo -= d, yhi += d;
  }
  const std::vector<double> yt = nice_ticks(ylo, yhi, 5);
  std::vector<double> xt = nice_ticks(xlo, xhi, 6);
  if (xt.size() > 1 && xt[1] - xt[0] < 1) {  // steps are integers
    xt.clear();
    for (double s = std::ceil(xlo); s <= xhi; s += 1) xt.push_back(s);
  }
  const Frame f{xlo,
                xhi,
                yt.front(),
                yt.back(),
                double(kLeft),
                double(kTop),
                double(layout.width - kLeft - kRight),
                double(layout.height - kTop - kBottom)};
  html += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" "
      "height=\"{1}\" role=\"img\" aria-label=\"{2}\">",
      layout.width, layout.height, html_escape(chart.title));
  html += fmt::format("<rect class=\"plot\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>", f.left,
                      f.top, f.width, f.height);
  const double yspacing = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (double v : yt) {
    const double y = f.py(v);
    html += fmt::format(
        "<line class=\"grid\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>"
        "<text class=\"ytick\" x=\"{:.1f}\" y=\"{:.1f}\">{}</text>",
        f.left, y, f.left + f.width, y, f.left - 6, y + 4, tick_label(v, yspacing));
  }
  const double xspacing = xt.size() > 1 ? xt[1] - xt[0] : 1;
  for (double v : xt) {
    if (v < xlo || v > xhi) continue;
    const double x = f.px(v);
    html += fmt::format(
        "<line class=\"grid\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>"
        "<text class=\"xtick\" x=\"{:.1f}\" y=\"{:.1f}\">{}</text>",
        x, f.top, x, f.top + f.height, x, f.top + f.height + 16, tick_label(v, xspacing));
  }
  html += fmt::format("<text class=\"xlabel\" x=\"{:.1f}\" y=\"{}\">step</text>",
                      f.left + f.width / 2, layout.height - 2);
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const char* color = series_color(i);
    const std::optional<size_t> markers = ordinal[i];
    std::string band, line, points;
    for (const auto& run : reduced[i]) {
      const bool spread =
          std::any_of(run.begin(), run.end(), [](const ChartPoint& p) { return p.max > p.min; });
      if (spread && run.size() > 1) {  // max forwards, min backwards: one closed outline
        for (size_t k = 0; k < run.size(); ++k)
          band +=
              fmt::format("{}{:.1f},{:.1f}", k == 0 ? "M" : "L", f.px(run[k].x), f.py(run[k].max));
        for (size_t k = run.size(); k-- > 0;)
          band += fmt::format("L{:.1f},{:.1f}", f.px(run[k].x), f.py(run[k].min));
        band += "Z";
      }
      if (markers)
        for (const ChartPoint& p : run) points += marker(*markers, f.px(p.x), f.py(p.mean), color);
      if (run.size() == 1) {  // an isolated step: a path of one point would not show
        const ChartPoint& p = run[0];
        if (!markers)
          points += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>",
                                f.px(p.x), f.py(p.mean), color);
        if (p.max > p.min)
          points += fmt::format(
              "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" "
              "stroke-opacity=\"0.4\"/>",
              f.px(p.x), f.py(p.max), f.py(p.min), color);
        continue;
      }
      for (size_t k = 0; k < run.size(); ++k)
        line +=
            fmt::format("{}{:.1f},{:.1f}", k == 0 ? "M" : "L", f.px(run[k].x), f.py(run[k].mean));
    }
    if (!band.empty())
      html += fmt::format("<path class=\"band\" d=\"{}\" fill=\"{}\" stroke=\"{}\"/>", band, color,
                          color);
    if (!line.empty())
      html += fmt::format("<path class=\"line\" d=\"{}\" stroke=\"{}\" stroke-width=\"{}\"{}/>",
                          line, color, series_width(i), dash_attribute(i));
    html += points;
  }
  return html + "</svg></figure>";
}

}  // namespace fp8rl::cli
