#include "gradmesh/obs/dashboard_page.h"

#include "gradmesh/obs/report_html.h"

namespace gradmesh::obs {

const std::string& dashboard_page_html() {
  static const std::string page = [] {
    std::string text =
#include "gradmesh/dashboard_page.inc"
        ;
    // One renderer for every page: the dashboard draws with the same
    // charts.js as report.html, inlined so the page stays one file.
    const std::string placeholder = kChartsPlaceholder;
    const size_t at = text.find(placeholder);
    if (at != std::string::npos) text.replace(at, placeholder.size(), charts_js());
    return text;
  }();
  return page;
}

}  // namespace gradmesh::obs
