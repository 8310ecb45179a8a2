// Line charts as inline SVG for `fp8rl report`: no script, no external resource, so the page
// opens anywhere (a browser offline, an attachment, a CI artifact).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fp8rl::cli {

struct ChartSeries {
  std::string label;
  std::vector<double> y;  // one per x of the chart; NaN (a null or absent value) is a gap
  bool dashed = false;    // a derived line (a smoothed curve) drawn under the same colour rules
};

struct Chart {
  std::string title;
  std::string unit;       // of the y axis, shown in the title ("" for a pure number)
  std::vector<double> x;  // steps, in file order
  std::vector<ChartSeries> series;
};

struct ChartLayout {
  int width = 720, height = 260;
  // Above this many points a series is drawn as one point per bucket of steps (the bucket's
  // mean) plus a band over the bucket's min..max, so that spikes stay visible in a long run.
  size_t max_points = 600;
};

// The chart as one <figure> holding a legend and an <svg>.
std::string render_chart(const Chart& chart, const ChartLayout& layout = {});

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
