#include "gradmesh/obs/metering.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>

namespace gradmesh::obs {

Cost cost_of(const Consumption& used, const Prices& prices) {
  Cost c;
  c.compute = used.cpu_seconds / 3600.0 * prices.core_hour;
  c.storage = used.storage_gb_seconds / kSecondsPerBillingMonth * prices.storage_gb_month;
  c.egress = used.inter_host_bytes / 1e9 * prices.egress_gb;
  return c;
}

namespace {

const char* currency_symbol(const std::string& currency) {
  if (currency == "USD") return "$";
  if (currency == "EUR") return "\u20ac";
  if (currency == "GBP") return "\u00a3";
  return nullptr;
}

std::string with_currency(const std::string& amount, const std::string& currency) {
  if (const char* symbol = currency_symbol(currency)) return symbol + amount;
  return amount + " " + (currency.empty() ? "?" : currency);
}

// `value` rounded to 3 significant digits, halves away from zero (as
// JavaScript's toPrecision, so both sides print the same).
double round3(double value) {
  if (value == 0 || !std::isfinite(value)) return value;
  const double scale = std::pow(10.0, std::floor(std::log10(std::abs(value))) - 2);
  return std::floor(std::abs(value) / scale + 0.5) * scale * (value < 0 ? -1 : 1);
}

std::string strip_zeros(std::string text) {
  if (text.find('.') == std::string::npos) return text;
  while (text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  return text;
}

}  // namespace

std::string money_text(double amount, const std::string& currency) {
  if (!std::isfinite(amount)) return "\u2014";
  if (amount != 0 && std::abs(amount) < 0.005) return (amount < 0 ? "> -" : "< ") + with_currency("0.01", currency);
  char digits[64];
  std::snprintf(digits, sizeof digits, "%.2f", std::abs(amount));
  std::string text = digits;
  for (std::ptrdiff_t at = static_cast<std::ptrdiff_t>(text.find('.')) - 3; at > 0; at -= 3)
    text.insert(static_cast<size_t>(at), ",");
  return (amount < 0 ? "-" : "") + with_currency(text, currency);
}

std::string price_text(double amount, const std::string& currency) {
  char digits[64];
  std::snprintf(digits, sizeof digits, "%.4g", amount);
  return with_currency(digits, currency);
}

std::string bytes_text(double bytes, const std::string& per) {
  if (!std::isfinite(bytes)) return "\u2014";
  static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  const std::string sign = bytes < 0 ? "-" : "";
  double r = round3(std::abs(bytes));
  size_t unit = 0;
  while (r >= 1000 && unit + 1 < std::size(kUnits)) r = round3(r / 1000), ++unit;
  if (unit == 0 && r != 0 && r < 1) return sign + "< 1 B" + per;
  if (unit == 0) r = std::floor(r + 0.5);  // whole bytes, halves up (as Math.round)
  char text[64];
  const int decimals = unit == 0 ? 0 : std::max(0, 2 - static_cast<int>(std::floor(std::log10(r))));
  std::snprintf(text, sizeof text, "%.*f", decimals, r);
  return sign + strip_zeros(text) + " " + kUnits[unit] + per;
}

}  // namespace gradmesh::obs
