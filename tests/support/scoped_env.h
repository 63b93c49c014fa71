#pragma once
// An environment variable changed for one scope: the destructor puts back what was there before (its old
// value, or nothing), so a failing test cannot leak a setting into the tests after it.

#include <string>

namespace moe::test {

class ScopedEnv {
 public:
  explicit ScopedEnv(const char* name);  // remembers the variable; changes nothing yet
  ScopedEnv(const char* name, const std::string& value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  void set(const std::string& value) const;
  void unset() const;

 private:
  std::string name_;
  std::string saved_;
  bool had_ = false;
};

}  // namespace moe::test
