// The hand-written SVG of `colrow bench tp-profile` (see tp_profile_svg.h).
#include "tp_profile_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace colrow::apps {
namespace {

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text)
    out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return out;
}

std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

// SVG elements, one line each; `attrs` are extra attributes.
std::string svg_line(double x1, double y1, double x2, double y2, const std::string& attrs) {
  return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" +
         num(y2) + "\" " + attrs + "/>\n";
}
std::string svg_text(double x, double y, const std::string& attrs, const std::string& text) {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" " + attrs + ">" + xml_escape(text) +
         "</text>\n";
}
std::string svg_dot(double x, double y, const std::string& colour) {
  return "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"4\" fill=\"" + colour + "\"/>\n";
}

}  // namespace

// x = d_model on a log2 axis, y = t_comm / t_compute on a log10 axis; per
// R >= 2 a solid line with markers (measured) and a dashed one (predicted) in
// the R's colour. R = 1 is left out: it has no communication, its ratio is 0
// by the model and timer noise by measurement.
std::string tp_profile_svg(const std::vector<PlotPoint>& rows, int64_t min_d, int64_t max_d,
                           const std::string& title, const std::vector<std::string>& footer) {
  constexpr double kWidth = 860, kHeight = 570;
  constexpr double kLeft = 90, kRight = 640, kTop = 60, kBottom = 460;  // the plot area
  const std::vector<std::string> colours = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                            "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  const std::string dashed = " stroke-dasharray=\"7 5\"";
  std::vector<int> tps;
  double lo = INFINITY, hi = 0.0;
  for (const PlotPoint& r : rows) {
    if (r.tp < 2 || !(r.measured > 0.0)) continue;
    if (std::find(tps.begin(), tps.end(), r.tp) == tps.end()) tps.push_back(r.tp);
    for (double v : {r.measured, r.predicted}) {
      if (v > 0.0) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  // Whole decades on y; half a step of d beyond the sweep on x.
  const int y_lo = tps.empty() ? -3 : static_cast<int>(std::floor(std::log10(lo)));
  const int y_hi =
      tps.empty() ? 1 : std::max(y_lo + 1, static_cast<int>(std::ceil(std::log10(hi))));
  const double x_lo = std::log2(static_cast<double>(min_d)) - 0.25;
  const double x_hi = std::log2(static_cast<double>(max_d)) + 0.25;
  auto px = [&](double d) {
    return kLeft + (std::log2(d) - x_lo) / (x_hi - x_lo) * (kRight - kLeft);
  };
  auto py = [&](double v) {
    return kBottom - (std::log10(v) - y_lo) / (y_hi - y_lo) * (kBottom - kTop);
  };

  std::ostringstream s;
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" viewBox=\"0 0 " << kWidth << " " << kHeight
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << svg_text(kWidth / 2, 28, "text-anchor=\"middle\" font-size=\"15\"", title);
  // Grid, ticks and tick labels: every d of the sweep; decades of the ratio
  // with 2..9 x each as lighter lines.
  for (int64_t d = min_d; d <= max_d; d *= 2) {
    const double x = px(static_cast<double>(d));
    s << svg_line(x, kTop, x, kBottom, "stroke=\"#e4e4e4\"")
      << svg_line(x, kBottom, x, kBottom + 6, "stroke=\"black\"")
      << svg_text(x, kBottom + 20, "text-anchor=\"middle\"", std::to_string(d));
  }
  for (int e = y_lo; e <= y_hi; ++e) {
    const double y = py(std::pow(10.0, e));
    char label[16];
    std::snprintf(label, sizeof label, "%g", std::pow(10.0, e));
    s << svg_line(kLeft, y, kRight, y, "stroke=\"#c8c8c8\"")
      << svg_line(kLeft - 6, y, kLeft, y, "stroke=\"black\"")
      << svg_text(kLeft - 9, y + 4, "text-anchor=\"end\"", label);
    for (int m = 2; m <= 9 && e < y_hi; ++m) {
      const double ym = py(m * std::pow(10.0, e));
      s << svg_line(kLeft, ym, kRight, ym, "stroke=\"#f0f0f0\"");
    }
  }
  s << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kRight - kLeft
    << "\" height=\"" << kBottom - kTop << "\" fill=\"none\" stroke=\"black\"/>\n"
    << svg_text((kLeft + kRight) / 2, kBottom + 44, "text-anchor=\"middle\"",
                "d_model (log2 scale)")
    << "<text transform=\"translate(" << kLeft - 60 << " " << (kTop + kBottom) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">t_comm / t_compute (log scale)</text>\n";

  // Per R: the predicted and the measured line, and two legend entries.
  double legend_y = kTop + 10;
  for (size_t i = 0; i < tps.size(); ++i) {
    const std::string& colour = colours[i % colours.size()];
    const std::string stroke = "stroke=\"" + colour + "\" stroke-width=\"2\"";
    std::string measured, predicted, dots;
    for (const PlotPoint& r : rows) {
      if (r.tp != tps[i] || !(r.measured > 0.0)) continue;
      const double x = px(static_cast<double>(r.d_model)), y = py(r.measured);
      measured += num(x) + "," + num(y) + " ";
      dots += svg_dot(x, y, colour);
      if (r.predicted > 0.0) predicted += num(x) + "," + num(py(r.predicted)) + " ";
    }
    const std::string tp = std::to_string(tps[i]);
    s << "<polyline class=\"predicted\" data-tp=\"" << tp << "\" points=\"" << predicted
      << "\" fill=\"none\" " << stroke << dashed << "/>\n"
      << "<polyline class=\"measured\" data-tp=\"" << tp << "\" points=\"" << measured
      << "\" fill=\"none\" " << stroke << "/>\n"
      << dots << svg_line(kRight + 20, legend_y, kRight + 56, legend_y, stroke)
      << svg_dot(kRight + 38, legend_y, colour)
      << svg_text(kRight + 64, legend_y + 4, "", "R = " + tp + " measured")
      << svg_line(kRight + 20, legend_y + 20, kRight + 56, legend_y + 20, stroke + dashed)
      << svg_text(kRight + 64, legend_y + 24, "", "R = " + tp + " predicted");
    legend_y += 40;
  }
  s << svg_text(kRight + 20, legend_y + 6, "font-size=\"11\"", "R = 1: no communication");
  if (tps.empty()) {
    s << svg_text((kLeft + kRight) / 2, (kTop + kBottom) / 2, "text-anchor=\"middle\"",
                  "one rank: nothing communicates, nothing to plot");
  }
  for (size_t i = 0; i < footer.size(); ++i) {
    s << svg_text(kLeft - 60, kBottom + 66 + 15 * i, "font-size=\"11\"", footer[i]);
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace colrow::apps
