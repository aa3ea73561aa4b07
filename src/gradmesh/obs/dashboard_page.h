// The live dashboard's page (dashboard.html, compiled in at build time): one
// self-contained HTML file with its script and styles, which reads the run
// from the server-sent events at the relative URL "events". Its charts are
// drawn by charts.js (report_html.h: charts_js()), inlined where
// dashboard.html holds kChartsPlaceholder.
#pragma once

#include <string>

namespace gradmesh::obs {

// The comment in dashboard.html that the page's copy of charts.js replaces.
inline constexpr const char* kChartsPlaceholder = "/* charts.js is inlined here (obs/dashboard_page.cc) */";

const std::string& dashboard_page_html();

}  // namespace gradmesh::obs
