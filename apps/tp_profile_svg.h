// The SVG plot of `colrow bench tp-profile`, written by hand (no plotting
// library in the dependency list): x = d_model on a log2 axis, y = t_comm /
// t_compute on a log10 axis, one colour per R; measured solid with markers,
// predicted dashed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace colrow::apps {

// One (R, d) of the sweep.
struct PlotPoint {
  int tp = 1;
  int64_t d_model = 0;
  double measured = 0.0;   // t_comm / t_compute
  double predicted = 0.0;  // the model's
};

// The whole SVG document. Points with R < 2 or no measured ratio are left
// out; `footer` lines go under the plot.
std::string tp_profile_svg(const std::vector<PlotPoint>& rows, int64_t min_d, int64_t max_d,
                           const std::string& title, const std::vector<std::string>& footer);

}  // namespace colrow::apps
