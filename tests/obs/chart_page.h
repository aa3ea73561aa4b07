// Test support: what a page built around charts.js carries, read back.
#pragma once

#include <string>

namespace gradmesh::testing {

// The JSON in the page's <script type="application/json" id="gradmesh-chart-data">; "" when absent.
inline std::string chart_page_data(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"gradmesh-chart-data\">";
  const size_t at = page.find(open);
  if (at == std::string::npos) return "";
  const size_t from = at + open.size();
  return page.substr(from, page.find("</script>", from) - from);
}

// How often `what` occurs in `text`, overlapping occurrences included.
inline size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace gradmesh::testing
