// The live dashboard's page (dashboard.html, compiled in at build time): one
// self-contained HTML file with its script and styles, which reads the run
// from the server-sent events at the relative URL "events".
#pragma once

#include <string>

namespace gradmesh::obs {

const std::string& dashboard_page_html();

}  // namespace gradmesh::obs
