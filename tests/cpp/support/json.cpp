#include "json.hpp"

#include <charconv>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace sdm::testing {

// Recursive descent over the text (RFC 8259 grammar).
class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  Json parse_document() {
    Json value = parse_value();
    skip_space();
    if (pos_ != text_.size()) fail("trailing characters after the JSON value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at byte " + std::to_string(pos_));
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  char peek() {
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end of input");
    return text_[pos_];
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  bool consume_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Json parse_value() {
    Json out;
    const char c = peek();
    if (c == '{') {
      out.kind_ = Json::Kind::object;
      parse_members('}', [&] {
        if (peek() != '"') fail("expected a string key");
        std::string key = parse_string();
        expect(':');
        out.object_.emplace_back(std::move(key), parse_value());
      });
    } else if (c == '[') {
      out.kind_ = Json::Kind::array;
      parse_members(']', [&] { out.array_.push_back(parse_value()); });
    } else if (c == '"') {
      out.kind_ = Json::Kind::string;
      out.string_ = parse_string();
    } else if (consume_literal("true")) {
      out.kind_ = Json::Kind::boolean;
      out.boolean_ = true;
    } else if (consume_literal("false")) {
      out.kind_ = Json::Kind::boolean;
    } else if (!consume_literal("null")) {
      out.kind_ = Json::Kind::number;
      out.number_ = parse_number();
    }
    return out;
  }

  // The comma-separated members of an object or array, up to `close`; the opening bracket is
  // next in the input.
  template <typename F>
  void parse_members(char close, F parse_member) {
    ++pos_;
    if (peek() == close) {
      ++pos_;
      return;
    }
    while (true) {
      parse_member();
      if (peek() == close) {
        ++pos_;
        return;
      }
      expect(',');
    }
  }

  double parse_number() {
    // JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? ; from_chars does the rest.
    const std::size_t start = pos_;
    auto digits = [this] {
      const std::size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      if (pos_ == from) fail("expected a digit");
    };
    if (text_[pos_] == '-') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else {
      digits();
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      digits();
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      digits();
    }
    double value = 0.0;
    const auto result = std::from_chars(text_.data() + start, text_.data() + pos_, value);
    if (result.ec != std::errc() || result.ptr != text_.data() + pos_) fail("bad number");
    return value;
  }

  unsigned parse_hex4() {
    if (pos_ + 4 > text_.size()) fail("short \\u escape");
    unsigned code = 0;
    const auto result = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, code, 16);
    if (result.ptr != text_.data() + pos_ + 4) fail("bad \\u escape");
    pos_ += 4;
    return code;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xc0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xe0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    }
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated escape");
      switch (text_[pos_++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned code = parse_hex4();
          if (code >= 0xd800 && code < 0xdc00) {  // a surrogate pair
            if (!consume_literal("\\u")) fail("lone high surrogate");
            const unsigned low = parse_hex4();
            if (low < 0xdc00 || low >= 0xe000) fail("bad low surrogate");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          } else if (code >= 0xdc00 && code < 0xe000) {
            fail("lone low surrogate");
          }
          append_utf8(out, code);
          break;
        }
        default: fail("unknown escape");
      }
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

Json Json::parse(std::string_view text) { return JsonParser(text).parse_document(); }

Json Json::parse_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("JSON: cannot open " + path);
  std::ostringstream text;
  text << file.rdbuf();
  return parse(text.str());
}

namespace {

[[noreturn]] void wrong_kind(const char* wanted) {
  throw std::runtime_error(std::string("JSON: value is not ") + wanted);
}

}  // namespace

bool Json::boolean() const {
  if (kind_ != Kind::boolean) wrong_kind("a boolean");
  return boolean_;
}

double Json::number() const {
  if (kind_ != Kind::number) wrong_kind("a number");
  return number_;
}

std::int64_t Json::integer() const {
  const auto value = static_cast<std::int64_t>(number());
  if (static_cast<double>(value) != number_) wrong_kind("an integer");
  return value;
}

const std::string& Json::string() const {
  if (kind_ != Kind::string) wrong_kind("a string");
  return string_;
}

const std::vector<Json>& Json::array() const {
  if (kind_ != Kind::array) wrong_kind("an array");
  return array_;
}

const std::vector<std::pair<std::string, Json>>& Json::object() const {
  if (kind_ != Kind::object) wrong_kind("an object");
  return object_;
}

bool Json::contains(std::string_view key) const {
  if (kind_ != Kind::object) return false;
  for (const auto& member : object_) {
    if (member.first == key) return true;
  }
  return false;
}

const Json& Json::operator[](std::string_view key) const {
  for (const auto& member : object()) {
    if (member.first == key) return member.second;
  }
  throw std::runtime_error("JSON: no member \"" + std::string(key) + "\"");
}

}  // namespace sdm::testing
