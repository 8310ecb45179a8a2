// Renders a parsed Template against a context, with the environment HF transformers builds
// (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols), its
// tojson, raise_exception and strftime_now) and jinja2's default Undefined.
//
// Scoping follows jinja2: {% for %} bodies (one scope per iteration), macro calls, {% with %},
// {% set %}...{% endset %} and {% filter %} bodies get their own scope; {% if %} does not. Macros
// see the scope they were defined in as it is when they run. Scopes and objects live in arenas
// owned by the Interpreter, so closures and namespaces can refer to each other (even in cycles)
// without leaking, and all of it is freed with the Interpreter.
//
// Every render runs on a Budget (budget.h): steps, recursion depth, the size of each string and
// list built, and the output. Recursion (nested expressions and blocks, macro calls) is bounded
// by RenderLimits::max_depth (kMaxEvalDepth); beyond it the render fails with a TemplateError
// instead of exhausting the stack. At the limit a release build uses under 1 MB of stack
// (measured with recursive macros and loops), so rendering on a worker thread with the default
// 8 MB stack is safe.
#pragma once

#include <ctime>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/budget.h"
#include "tokenizer/jinja/value.h"

namespace fp8rl::jinja {

struct RenderOptions {
  // The time strftime_now() formats (local time fields); unset: the current local time.
  std::optional<std::tm> fixed_now;
  RenderLimits limits;
  // When set, receives the budget's high-water marks when the render ends (also on failure).
  BudgetUse* use = nullptr;
};

class Interpreter {
 public:
  // `context` is a dict of the template's variables.
  Interpreter(const Template& tpl, Value context, RenderOptions options);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Throws TemplateError (kind runtime or raised) with the template line.
  std::string render();

  // Services that filters, tests, methods and globals use.
  Value call(const Value& callee, CallArgs args);
  Value apply_filter(std::string_view name, const Value& input, CallArgs args);
  bool apply_test(std::string_view name, const Value& input, CallArgs args);
  Value getattr(const Value& object, std::string_view name);
  Value getitem(const Value& object, const Value& key);
  Value::Object* new_object(std::string type_name, bool is_namespace);
  const RenderOptions& options() const { return options_; }
  Budget& budget() { return budget_; }
  // iterate(v), charged one step per item, a string's code points checked as a list first.
  std::vector<Value> items_of(const Value& v);
  // str(v) within the budget's string size.
  std::string text(const Value& v) { return to_str(v, budget_.limits().max_string_bytes); }
  // Python's binary operators as templates evaluate them (the sum filter adds with this).
  Value binary(BinaryExpr::Op op, const Value& a, const Value& b) { return eval_binary(op, a, b); }

 private:
  struct Scope;
  enum class Flow { normal, break_loop, continue_loop };
  class DepthGuard;
  class ScopeLease;

  Value lookup(Scope* scope, const std::string& name);
  void assign(Scope* scope, const Target& target, const Value& value);

  Flow exec_body(const Body& body, Scope* scope, std::string& out);
  Flow exec(const Stmt& stmt, Scope* scope, std::string& out);
  Flow exec_for(const ForStmt& stmt, Scope* scope, std::string& out);
  void run_loop(const ForStmt& stmt, Scope* scope, const Value& iterable, int depth,
                std::string& out);
  std::string render_in_child(const Body& body, Scope* scope);
  // out += text, checked against the output budget (the render's own text) or the string budget
  // (a macro's, block's or loop()'s text) before it grows.
  void emit(std::string& out, std::string_view text);
  Value define_macro(const MacroStmt& macro, Scope* scope);
  Value invoke_macro(const MacroStmt& macro, Scope* closure, CallArgs& args);

  Value eval(const Expr& expr, Scope* scope);
  Value eval_node(const Expr& expr, Scope* scope);  // eval_kind, its new value charged
  Value eval_kind(const Expr& expr, Scope* scope);
  CallArgs eval_args(const ArgsExpr& args, Scope* scope);
  Value eval_filter(const FilterExpr& f, Scope* scope, const Value* block_input);
  Value eval_slice(const Value& object, const SliceExpr& slice, Scope* scope);
  std::optional<Value> fold_constant(const Expr& expr);
  Value eval_binary(BinaryExpr::Op op, const Value& a, const Value& b);
  bool eval_compare(CompareExpr::Op op, const Value& a, const Value& b);

  Scope* acquire_scope(Scope* parent);
  void release_scope(Scope* scope);
  void mark_captured(Scope* scope);

  const Template& tpl_;
  Value context_;
  RenderOptions options_;
  std::deque<std::unique_ptr<Scope>> scopes_;
  std::vector<Scope*> free_scopes_;
  std::deque<std::unique_ptr<Value::Object>> objects_;
  Budget budget_;
  const std::string* root_out_ = nullptr;
  // Evaluating as jinja2's compile-time constant folding does (see Expr::fold_candidate).
  bool folding_ = false;
};

}  // namespace fp8rl::jinja
