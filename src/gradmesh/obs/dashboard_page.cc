#include "gradmesh/obs/dashboard_page.h"

namespace gradmesh::obs {

const std::string& dashboard_page_html() {
  static const std::string page =
#include "gradmesh/dashboard_page.inc"
      ;
  return page;
}

}  // namespace gradmesh::obs
