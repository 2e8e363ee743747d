// json.hpp - a small JSON reader for test data (tests/data/*.json): objects, arrays, numbers,
// strings, true / false / null. Numbers are parsed to the nearest double (std::from_chars).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sdm::testing {

class Json {
 public:
  enum class Kind { null, boolean, number, string, array, object };

  // Throws std::runtime_error naming the byte offset of the first syntax error.
  static Json parse(std::string_view text);
  static Json parse_file(const std::string& path);

  Kind kind() const { return kind_; }
  // Typed accessors; each throws std::runtime_error when the value is of another kind.
  bool boolean() const;
  double number() const;
  std::int64_t integer() const;  // a number with an exact integer value
  const std::string& string() const;
  const std::vector<Json>& array() const;
  const std::vector<std::pair<std::string, Json>>& object() const;
  bool contains(std::string_view key) const;     // false unless an object with that key
  const Json& operator[](std::string_view key) const;  // the object's member; throws if absent

 private:
  friend class JsonParser;
  Kind kind_ = Kind::null;
  bool boolean_ = false;
  double number_ = 0.0;
  std::string string_;
  std::vector<Json> array_;
  std::vector<std::pair<std::string, Json>> object_;
};

}  // namespace sdm::testing
