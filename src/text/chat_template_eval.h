#pragma once
// Runs a parsed chat template over variables, as jinja2 renders it: for loops open a scope per iteration
// (a `set` inside does not outlive it; namespace() objects do), macros and call blocks, filters and tests,
// Python's operators on the values.

#include "chat_template_ast.h"

#include <string>
#include <utility>
#include <vector>

namespace moe::chat {

// An evaluation error at a template line.
struct LineError {
  int line;
  std::string message;
};

// Throws LineError, or TemplateRaised for the template's raise_exception().
std::string render(const Body& body, std::vector<std::pair<std::string, Value>> variables);

}  // namespace moe::chat
