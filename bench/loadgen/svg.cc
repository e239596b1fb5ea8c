// Hand-written SVG for report.h: per load shape one row of two panels (output tok/s, TTFT p95)
// with one line per run. The x axis is categorical (ladder steps evenly spaced), which reads well
// for geometric ladders such as 1,8,32,64 without a log scale.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>

#include "report.h"

namespace ramjet::bench {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr double kWidth = 1000, kRowHeight = 400, kHeader = 40;
constexpr double kPanelW = 500, kPlotL = 70, kPlotR = 20, kPlotT = 40, kPlotB = 90;

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string f1(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// A "nice" axis maximum (1, 2, 2.5, 5 x 10^k) at or above v.
double nice_max(double v) {
  if (!(v > 0)) return 1;
  const double e = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * e >= v * 1.0000001) return m * e;
  return 10 * e;
}

void panel(std::string& svg, double ox, double oy, const std::string& title,
           const std::vector<const RunReport*>& runs, const std::vector<double>& xs,
           std::string_view shape, const std::function<double(const StepReport&)>& metric) {
  const double pw = kPanelW - kPlotL - kPlotR, ph = kRowHeight - kPlotT - kPlotB;
  const double x0 = ox + kPlotL, y0 = oy + kPlotT;
  double ymax = 0;
  for (const auto* r : runs)
    for (const auto& s : r->steps)
      if (double v = metric(s); std::isfinite(v)) ymax = std::max(ymax, v);
  ymax = nice_max(ymax);
  auto px = [&](size_t i) {
    return xs.size() == 1 ? x0 + pw / 2 : x0 + pw * (0.05 + 0.9 * static_cast<double>(i) /
                                                                 static_cast<double>(xs.size() - 1));
  };
  auto py = [&](double v) { return y0 + ph - ph * v / ymax; };

  svg += "<text x=\"" + f1(x0 + pw / 2) + "\" y=\"" + f1(oy + 22) +
         "\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">" + xml_escape(title) +
         "</text>\n";
  for (int t = 0; t <= 5; ++t) {  // horizontal grid and y labels
    const double v = ymax * t / 5, y = py(v);
    svg += "<line x1=\"" + f1(x0) + "\" y1=\"" + f1(y) + "\" x2=\"" + f1(x0 + pw) + "\" y2=\"" +
           f1(y) + "\" stroke=\"#ddd\"/>\n";
    svg += "<text x=\"" + f1(x0 - 6) + "\" y=\"" + f1(y + 4) +
           "\" text-anchor=\"end\" font-size=\"11\">" + format_number(v) + "</text>\n";
  }
  svg += "<rect x=\"" + f1(x0) + "\" y=\"" + f1(y0) + "\" width=\"" + f1(pw) + "\" height=\"" +
         f1(ph) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  for (size_t i = 0; i < xs.size(); ++i) {  // x ticks
    const double x = px(i);
    svg += "<line x1=\"" + f1(x) + "\" y1=\"" + f1(y0 + ph) + "\" x2=\"" + f1(x) + "\" y2=\"" +
           f1(y0 + ph + 5) + "\" stroke=\"#333\"/>\n";
    svg += "<text x=\"" + f1(x) + "\" y=\"" + f1(y0 + ph + 18) +
           "\" text-anchor=\"middle\" font-size=\"11\">" +
           (shape == "trace" ? std::string("trace") : format_number(xs[i])) + "</text>\n";
  }
  svg += "<text x=\"" + f1(x0 + pw / 2) + "\" y=\"" + f1(y0 + ph + 36) +
         "\" text-anchor=\"middle\" font-size=\"12\">" + xml_escape(x_name(shape)) + "</text>\n";
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const char* color = kColors[ri % std::size(kColors)];
    std::string path;
    bool pen_down = false;  // false at the start and after a missing point: the next one moves
    for (size_t i = 0; i < xs.size(); ++i) {
      const StepReport* s = nullptr;
      for (const auto& st : runs[ri]->steps)
        if (st.x == xs[i]) s = &st;
      const double v = s ? metric(*s) : kNaN;
      if (!std::isfinite(v)) {
        pen_down = false;
        continue;
      }
      path += pen_down ? 'L' : 'M';
      pen_down = true;
      path += f1(px(i));
      path += ',';
      path += f1(py(v));
      path += ' ';
      svg += "<circle cx=\"" + f1(px(i)) + "\" cy=\"" + f1(py(v)) + "\" r=\"3.5\" fill=\"" + color +
             "\"><title>" + xml_escape(runs[ri]->label) + " @ " + format_number(xs[i]) + ": " +
             format_number(v) + "</title></circle>\n";
    }
    if (!path.empty())
      svg += "<path d=\"" + path + "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"2\"/>\n";
  }
}

}  // namespace

std::string render_svg(const std::vector<RunReport>& runs) {
  std::vector<std::string_view> shapes;
  for (std::string_view shape : {"closed", "open", "trace"})
    if (std::any_of(runs.begin(), runs.end(), [&](const RunReport& r) { return r.shape == shape; }))
      shapes.push_back(shape);
  const double height = kHeader + kRowHeight * static_cast<double>(std::max<size_t>(1, shapes.size()));
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + f1(kWidth) +
                    "\" height=\"" + f1(height) + "\" viewBox=\"0 0 " + f1(kWidth) + " " +
                    f1(height) + "\" font-family=\"sans-serif\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::string title = "ramjet-bench";
  if (!runs.empty()) title += ": " + runs.front().workload;
  svg += "<text x=\"" + f1(kWidth / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" +
         xml_escape(title) + "</text>\n";
  double oy = kHeader;
  for (std::string_view shape : shapes) {
    std::vector<const RunReport*> group;
    std::set<double> xset;
    for (const auto& r : runs)
      if (r.shape == shape) {
        group.push_back(&r);
        for (const auto& s : r.steps) xset.insert(s.x);
      }
    std::vector<double> xs(xset.begin(), xset.end());
    const char* row = shape == "open" ? "open loop (Poisson arrivals)" : shape == "trace" ? "trace replay" : "closed loop";
    svg += "<text x=\"10\" y=\"" + f1(oy + 14) + "\" font-size=\"12\" fill=\"#555\">" + row + "</text>\n";
    // Against a TTFT target (--ttft-target-ms) the first panel is goodput.
    if (std::any_of(group.begin(), group.end(), [](const RunReport* r) { return has_goodput(*r); }))
      panel(svg, 0, oy, "goodput (req/s within the TTFT target)", group, xs, shape,
            [](const StepReport& s) { return s.goodput_req_s; });
    else
      panel(svg, 0, oy, "output tok/s", group, xs, shape,
            [](const StepReport& s) { return s.output_tok_s; });
    panel(svg, kPanelW, oy, "TTFT p95 (ms)", group, xs, shape,
          [](const StepReport& s) { return s.ttft_p95_ms; });
    double lx = kPlotL, ly = oy + kRowHeight - 28;  // legend under the panels
    for (size_t i = 0; i < group.size(); ++i) {
      const char* color = kColors[i % std::size(kColors)];
      svg += "<line x1=\"" + f1(lx) + "\" y1=\"" + f1(ly) + "\" x2=\"" + f1(lx + 22) + "\" y2=\"" +
             f1(ly) + "\" stroke=\"" + color + "\" stroke-width=\"3\"/>\n";
      std::string label = group[i]->label.empty() ? "run" : group[i]->label;
      svg += "<text x=\"" + f1(lx + 28) + "\" y=\"" + f1(ly + 4) + "\" font-size=\"12\">" +
             xml_escape(label) + "</text>\n";
      lx += 50 + 7.0 * static_cast<double>(label.size());
      if (lx > kWidth - 150) {
        lx = kPlotL;
        ly += 16;
      }
    }
    oy += kRowHeight;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace ramjet::bench
