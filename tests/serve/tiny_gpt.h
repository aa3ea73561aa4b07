// What the generation tests share: a GPT of eleven tokens spelled a..k, and
// the text codec for them.
#pragma once

#include <string>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/nn/gpt.h"
#include "gradmesh/serve/generation.h"

namespace gradmesh::serve::testing {

// Eleven tokens, the letters a..k; any other character is Error(kUsage).
inline TextCodec letters() {
  TextCodec c;
  c.encode = [](const std::string& text) {
    std::vector<int64_t> ids;
    for (char ch : text) {
      if (ch < 'a' || ch > 'k') throw_error(ErrorKind::kUsage, "text_input", std::string("holds '") + ch + "'");
      ids.push_back(ch - 'a');
    }
    return ids;
  };
  c.decode = [](const std::vector<int64_t>& ids) {
    std::string text;
    for (int64_t id : ids) text += static_cast<char>('a' + id);
    return text;
  };
  return c;
}

// Two blocks, two heads, 16 wide, a context of 8 tokens.
inline nn::GptSpec tiny_gpt_spec() {
  nn::GptSpec s;
  s.vocab_size = 11;
  s.block_size = 8;
  s.n_layer = 2;
  s.n_head = 2;
  s.n_embd = 16;
  return s;
}

}  // namespace gradmesh::serve::testing
