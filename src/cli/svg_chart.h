// Line charts as inline SVG for `fp8rl report`: no script, no external resource, so the page
// opens anywhere (a browser offline, an attachment, a CI artifact).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fp8rl::cli {

struct ChartSeries {
  std::string label;
  std::vector<double> y;  // one per x; NaN (a null or absent value) is a gap
  // The series' own steps where it has fewer than the chart (the evaluations'); empty: the
  // chart's x. Such a series is drawn with a marker at each of its points.
  std::vector<double> x;
};

struct Chart {
  std::string title;
  std::string unit;       // of the y axis, shown in the title ("" for a pure number)
  std::vector<double> x;  // steps, in file order
  std::vector<ChartSeries> series;
};

struct ChartLayout {
  // The SVG's coordinate box; the page scales it to its column (two charts per row).
  int width = 600, height = 250;
  // Above this many points a series is drawn as one point per bucket of steps (the bucket's
  // mean) plus a band over the bucket's min..max, so that spikes stay visible in a long run.
  size_t max_points = 600;
};

// The chart as one <figure> holding a legend and an <svg>. Each series gets its own colour,
// dash pattern and (on a series with its own steps) marker, the legend showing each, so that
// series lying on one another, or a page printed in grey, stay apart.
std::string render_chart(const Chart& chart, const ChartLayout& layout = {});

// The stroke-dasharray of the i-th series of a chart ("" for solid): no two of the first
// kDashPatterns series share one.
inline constexpr size_t kDashPatterns = 10;
const char* series_dash(size_t i);

// One plotted point: a step (or the mean step of a bucket) with the mean, min and max of its
// finite values.
struct ChartPoint {
  double x, mean, min, max;
};

// A series reduced for drawing: runs of points, a new run after every gap (NaN values). At most
// max_points points in all; fewer points than that are passed through unchanged.
std::vector<std::vector<ChartPoint>> reduce_series(const std::vector<double>& x,
                                                   const std::vector<double>& y, size_t max_points);

// Tick values covering [lo, hi] at a 1-2-5 spacing, about `target` of them; the first is <= lo
// and the last >= hi.
std::vector<double> nice_ticks(double lo, double hi, int target);

// Text for HTML content and attribute values: & < > " ' escaped, control characters other
// than tab and newline replaced by U+FFFD (a NUL would end the page for some readers).
std::string html_escape(std::string_view text);

}  // namespace fp8rl::cli
