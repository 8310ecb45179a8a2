#include "tokenizer/jinja/interpreter.h"

#include <cmath>
#include <limits>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/unicode.h"

namespace fp8rl::jinja {

struct Interpreter::Scope {
  Scope* parent = nullptr;
  bool captured = false;  // a closure refers to it: never recycled
  NameTable vars;         // hashed when large: 100k macros in one scope are found in O(1)

  Value* find(std::string_view name) { return vars.find(name); }
  void set(std::string_view name, Value value) { vars.set(name, std::move(value)); }
};

// One step and one level of depth for each statement, expression node and call.
class Interpreter::DepthGuard {
 public:
  explicit DepthGuard(Interpreter& interp) : interp_(interp) {
    interp_.budget_.step();
    interp_.budget_.enter();
  }
  ~DepthGuard() { interp_.budget_.leave(); }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  Interpreter& interp_;
};

// A child scope for the duration of a block; recycled afterwards unless a closure captured it.
class Interpreter::ScopeLease {
 public:
  ScopeLease(Interpreter& interp, Scope* parent)
      : interp_(interp), scope_(interp.acquire_scope(parent)) {}
  ~ScopeLease() { interp_.release_scope(scope_); }
  ScopeLease(const ScopeLease&) = delete;
  ScopeLease& operator=(const ScopeLease&) = delete;
  Scope* get() const { return scope_; }

 private:
  Interpreter& interp_;
  Scope* scope_;
};

namespace {

// Thrown while folding (Interpreter::folding_) by what jinja2 cannot evaluate at compile time.
struct NotConstant {};

bool has_safe_repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::none:
    case Value::Kind::boolean:
    case Value::Kind::integer:
    case Value::Kind::floating:
    case Value::Kind::string:
      return true;
    case Value::Kind::list:
    case Value::Kind::tuple:
      for (const Value& x : v.items()) {
        if (!has_safe_repr(x)) return false;
      }
      return true;
    case Value::Kind::dict:
      for (const auto& [k, x] : v.dict_data().items) {
        if (!has_safe_repr(k) || !has_safe_repr(x)) return false;
      }
      return true;
    default:
      return false;
  }
}

[[noreturn]] void raise_type_error_operands(std::string_view op, const Value& a, const Value& b) {
  fail("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

[[noreturn]] void fail_overflow() {
  fail("integer overflow: the result exceeds 64 bits");
}

std::int64_t checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail_overflow();
  return r;
}
std::int64_t checked_sub(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) fail_overflow();
  return r;
}
std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail_overflow();
  return r;
}

// Python's float floor division and modulo (float_divmod).
std::pair<double, double> float_divmod(double x, double y) {
  if (y == 0.0) fail("float divmod()");
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return {floordiv, mod};
}

// seq * n, its size checked (with overflow of the product caught) before it is allocated.
Value repeat(Budget& budget, const Value& seq, std::int64_t n) {
  if (n <= 0)
    return seq.is_string() ? Value::string("", seq.is_safe())
                           : (seq.is_tuple() ? Value::tuple({}) : Value::list({}));
  if (seq.is_string()) {
    const std::size_t size = budget.string_bytes(static_cast<std::int64_t>(seq.str().size()), n,
                                                 fmt::format("str * {}", n));
    budget.charge_bytes(static_cast<std::int64_t>(size));
    // By doubling: a few copies of growing blocks, not n appends of a possibly 1-byte string.
    std::string out;
    out.reserve(size);
    out = seq.str();
    while (out.size() * 2 <= size) out.append(out.data(), out.size());
    out.append(out.data(), size - out.size());
    return Value::string(std::move(out), seq.is_safe());
  }
  const std::size_t size = budget.item_count(static_cast<std::int64_t>(seq.items().size()), n,
                                             fmt::format("{} * {}", type_name(seq), n));
  budget.charge_items(static_cast<std::int64_t>(size));
  std::vector<Value> out;
  out.reserve(size);
  for (std::int64_t i = 0; i < n; ++i)
    out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

std::vector<Value> unpack(const Value& item, std::size_t n) {
  if (!(item.is_string() || item.is_sequence() || item.is_dict() || item.is_undefined())) {
    fail("cannot unpack non-iterable {} object", type_name(item));
  }
  // The length first: a long string is not split into characters to find it has too many.
  const auto len = static_cast<std::size_t>(length(item));
  if (len > n) fail("too many values to unpack (expected {})", n);
  if (len < n) fail("not enough values to unpack (expected {}, got {})", n, len);
  return iterate(item);
}

}  // namespace

std::optional<Value> Interpreter::fold_constant(const Expr& expr) {
  // Any failure makes jinja2 give up folding and compile the expression for run time.
  folding_ = true;
  try {
    Value v = eval_node(expr, nullptr);
    folding_ = false;
    return v;
  } catch (const NotConstant&) {
  } catch (const TemplateError& e) {
    // Running out of budget is no reason to try again at run time.
    if (e.kind() == TemplateError::Kind::budget) {
      folding_ = false;
      throw;
    }
  }
  folding_ = false;
  return std::nullopt;
}

Interpreter::Interpreter(const Template& tpl, Value context, RenderOptions options)
    : tpl_(tpl),
      context_(std::move(context)),
      options_(std::move(options)),
      budget_(options_.limits) {}

Interpreter::~Interpreter() = default;

std::string Interpreter::render() {
  std::string out;
  root_out_ = &out;
  Scope* root = acquire_scope(nullptr);
  root->captured = true;
  try {
    exec_body(tpl_.body, root, out);
  } catch (...) {
    if (options_.use != nullptr) *options_.use = budget_.use();
    throw;
  }
  budget_.check_output(out.size());
  if (options_.use != nullptr) *options_.use = budget_.use();
  return out;
}

void Interpreter::emit(std::string& out, std::string_view text) {
  const std::size_t size = out.size() + text.size();
  if (&out == root_out_) {
    budget_.check_output(size);
  } else {
    budget_.check_string(size, "a block's text");
  }
  out += text;
}

std::vector<Value> Interpreter::items_of(const Value& v) {
  if (v.is_string()) {
    budget_.check_items(v.str().size() < 4096 ? 0 : utf8_length(v.str()), "a string's characters");
    budget_.charge_bytes(static_cast<std::int64_t>(v.str().size()));
  }
  std::vector<Value> items = iterate(v);
  budget_.charge_items(static_cast<std::int64_t>(items.size()));
  return items;
}

Interpreter::Scope* Interpreter::acquire_scope(Scope* parent) {
  Scope* s;
  if (!free_scopes_.empty()) {
    s = free_scopes_.back();
    free_scopes_.pop_back();
  } else {
    scopes_.push_back(std::make_unique<Scope>());
    s = scopes_.back().get();
  }
  s->parent = parent;
  return s;
}

void Interpreter::release_scope(Scope* scope) {
  if (scope->captured) return;
  scope->vars.clear();
  scope->parent = nullptr;
  free_scopes_.push_back(scope);
}

void Interpreter::mark_captured(Scope* scope) {
  for (Scope* s = scope; s != nullptr && !s->captured; s = s->parent) s->captured = true;
}

Value::Object* Interpreter::new_object(std::string type_name, bool is_namespace) {
  objects_.push_back(std::make_unique<Value::Object>());
  Value::Object* o = objects_.back().get();
  o->type_name = std::move(type_name);
  o->is_namespace = is_namespace;
  return o;
}

Value Interpreter::lookup(Scope* scope, const std::string& name) {
  for (Scope* s = scope; s != nullptr; s = s->parent) {
    if (Value* v = s->find(name)) return *v;
  }
  if (const Value* v = context_.dict_data().find(std::string_view(name))) return *v;
  if (auto g = find_global(name)) return *g;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

void Interpreter::assign(Scope* scope, const Target& target, const Value& value) {
  if (!target.attr.empty()) {
    const Value ns = lookup(scope, target.names[0]);
    if (!ns.is_object() || !ns.object_ptr()->is_namespace) {
      fail("cannot assign attribute on non-namespace object");
    }
    ns.object_ptr()->set(target.attr, value);
    return;
  }
  if (!target.unpack) {
    scope->set(target.names[0], value);
    return;
  }
  std::vector<Value> parts = unpack(value, target.names.size());
  for (std::size_t i = 0; i < parts.size(); ++i) scope->set(target.names[i], parts[i]);
}

// ---------------------------------------------------------------------------------------------
// Statements

Interpreter::Flow Interpreter::exec_body(const Body& body, Scope* scope, std::string& out) {
  for (const StmtPtr& stmt : body) {
    const Flow flow = exec(*stmt, scope, out);
    if (flow != Flow::normal) return flow;
  }
  return Flow::normal;
}

std::string Interpreter::render_in_child(const Body& body, Scope* scope) {
  ScopeLease child(*this, scope);
  std::string out;
  exec_body(body, child.get(), out);
  return out;
}

Interpreter::Flow Interpreter::exec(const Stmt& stmt, Scope* scope, std::string& out) {
  DepthGuard guard(*this);
  try {
    switch (stmt.kind) {
      case Stmt::Kind::text:
        emit(out, static_cast<const TextStmt&>(stmt).text);
        return Flow::normal;
      case Stmt::Kind::output: {
        const auto& s = static_cast<const OutputStmt&>(stmt);
        // A constant {{ }} is printed as folded, whatever the value (see Expr::fold_candidate).
        if (s.expr->fold_candidate) {
          if (auto folded = fold_constant(*s.expr)) {
            emit(out, text(*folded));
            return Flow::normal;
          }
        }
        emit(out, text(eval_node(*s.expr, scope)));
        return Flow::normal;
      }
      case Stmt::Kind::if_: {
        const auto& s = static_cast<const IfStmt&>(stmt);
        for (const auto& [test, body] : s.branches) {
          if (truthy(eval(*test, scope))) return exec_body(body, scope, out);
        }
        return exec_body(s.otherwise, scope, out);
      }
      case Stmt::Kind::for_:
        return exec_for(static_cast<const ForStmt&>(stmt), scope, out);
      case Stmt::Kind::set: {
        const auto& s = static_cast<const SetStmt&>(stmt);
        assign(scope, s.target, eval(*s.value, scope));
        return Flow::normal;
      }
      case Stmt::Kind::set_block: {
        // jinja2 compiles set and filter blocks inline: a {% break %} in them leaves the loop
        // before the assignment or the output happens.
        const auto& s = static_cast<const SetBlockStmt&>(stmt);
        std::string text;
        {
          ScopeLease child(*this, scope);
          const Flow flow = exec_body(s.body, child.get(), text);
          if (flow != Flow::normal) return flow;
        }
        Value body = Value::string(std::move(text));
        budget_.charge_created(body.unshared_bytes());
        if (s.filter) {
          ScopeLease child(*this, scope);
          body = eval_filter(static_cast<const FilterExpr&>(*s.filter), child.get(), &body);
        }
        assign(scope, s.target, body);
        return Flow::normal;
      }
      case Stmt::Kind::macro: {
        const auto& s = static_cast<const MacroStmt&>(stmt);
        scope->set(s.name, define_macro(s, scope));
        return Flow::normal;
      }
      case Stmt::Kind::call_block: {
        const auto& s = static_cast<const CallBlockStmt&>(stmt);
        const auto& call = static_cast<const CallExpr&>(*s.call);
        Value callee = eval(*call.callee, scope);
        CallArgs args = eval_args(call.args, scope);
        args.keyword.emplace_back("caller", define_macro(*s.caller, scope));
        emit(out, text(this->call(callee, std::move(args))));
        return Flow::normal;
      }
      case Stmt::Kind::filter_block: {
        const auto& s = static_cast<const FilterBlockStmt&>(stmt);
        ScopeLease child(*this, scope);
        std::string body;
        const Flow flow = exec_body(s.body, child.get(), body);
        if (flow != Flow::normal) return flow;
        const Value input = Value::string(std::move(body));
        emit(out,
             text(eval_filter(static_cast<const FilterExpr&>(*s.filter), child.get(), &input)));
        return Flow::normal;
      }
      case Stmt::Kind::with: {
        const auto& s = static_cast<const WithStmt&>(stmt);
        std::vector<Value> values;
        for (const auto& [target, expr] : s.assignments) values.push_back(eval(*expr, scope));
        ScopeLease child(*this, scope);
        for (std::size_t i = 0; i < values.size(); ++i) {
          assign(child.get(), s.assignments[i].first, values[i]);
        }
        return exec_body(s.body, child.get(), out);
      }
      case Stmt::Kind::break_:
        return Flow::break_loop;
      case Stmt::Kind::continue_:
        return Flow::continue_loop;
      case Stmt::Kind::generation:
        emit(out, render_in_child(static_cast<const GenerationStmt&>(stmt).body, scope));
        return Flow::normal;
    }
  } catch (TemplateError& e) {
    if (e.line() == 0) e.set_line(stmt.line);
    throw;
  }
  return Flow::normal;
}

Interpreter::Flow Interpreter::exec_for(const ForStmt& stmt, Scope* scope, std::string& out) {
  run_loop(stmt, scope, eval(*stmt.iterable, scope), 1, out);
  return Flow::normal;
}

void Interpreter::run_loop(const ForStmt& stmt, Scope* scope, const Value& iterable, int depth,
                           std::string& out) {
  std::vector<Value> items = items_of(iterable);
  if (stmt.condition) {
    std::vector<Value> kept;
    ScopeLease test_scope(*this, scope);
    for (Value& item : items) {
      budget_.step();
      assign(test_scope.get(), stmt.target, item);
      if (truthy(eval(*stmt.condition, test_scope.get()))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  // jinja2 runs the else block unless some iteration reached the end of the body: a loop whose
  // every iteration ends in break or continue runs it too.
  const auto run_else = [&] {
    ScopeLease child(*this, scope);
    exec_body(stmt.otherwise, child.get(), out);
  };
  if (items.empty()) {
    run_else();
    return;
  }

  // One LoopContext per loop run, advanced in place, as jinja2 does.
  Value::Object* loop = new_object("LoopContext", false);
  const auto n = static_cast<std::int64_t>(items.size());
  auto last_changed = std::make_shared<std::optional<Value>>();
  loop->set("length", Value::integer(n));
  loop->set("depth", Value::integer(depth));
  loop->set("depth0", Value::integer(depth - 1));
  loop->set("changed", Value::callable("changed", [last_changed](Interpreter&, CallArgs& args) {
              Value current = Value::tuple(std::move(args.positional));
              if (last_changed->has_value() && equals(**last_changed, current)) {
                return Value::boolean(false);
              }
              *last_changed = std::move(current);
              return Value::boolean(true);
            }));
  if (stmt.recursive) {
    const ForStmt* s = &stmt;
    mark_captured(scope);
    loop->set("__call__",
              Value::callable("loop", [this, s, scope, depth](Interpreter&, CallArgs& args) {
                if (args.positional.size() != 1 || !args.keyword.empty()) {
                  fail("loop() takes exactly one argument");
                }
                std::string sub;
                run_loop(*s, scope, args.positional[0], depth + 1, sub);
                return Value::string(std::move(sub));
              }));
  }
  const Value loop_value = Value::object(loop);

  Scope* iteration = acquire_scope(scope);
  bool completed_body = false;
  for (std::int64_t i = 0; i < n; ++i) {
    budget_.step();
    if (iteration->captured) iteration = acquire_scope(scope);
    iteration->vars.clear();
    loop->set("index0", Value::integer(i));
    loop->set("index", Value::integer(i + 1));
    loop->set("revindex0", Value::integer(n - i - 1));
    loop->set("revindex", Value::integer(n - i));
    loop->set("first", Value::boolean(i == 0));
    loop->set("last", Value::boolean(i == n - 1));
    loop->set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    loop->set("nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
    loop->set("cycle", Value::callable("cycle", [i](Interpreter&, CallArgs& args) {
                if (args.positional.empty()) fail("no items for cycling given");
                return args.positional[static_cast<std::size_t>(i) % args.positional.size()];
              }));
    assign(iteration, stmt.target, items[i]);
    iteration->set("loop", loop_value);
    const Flow flow = exec_body(stmt.body, iteration, out);
    if (flow == Flow::normal) completed_body = true;
    if (flow == Flow::break_loop) break;
  }
  release_scope(iteration);
  if (!completed_body) run_else();
}

Value Interpreter::define_macro(const MacroStmt& macro, Scope* scope) {
  mark_captured(scope);
  const MacroStmt* m = &macro;
  return Value::callable(macro.name, [this, m, scope](Interpreter&, CallArgs& args) {
    return invoke_macro(*m, scope, args);
  });
}

Value Interpreter::invoke_macro(const MacroStmt& macro, Scope* closure, CallArgs& args) {
  DepthGuard guard(*this);
  ScopeLease lease(*this, closure);
  Scope* scope = lease.get();
  const std::size_t n_params = macro.params.size();
  if (args.positional.size() > n_params && !macro.uses_varargs) {
    fail("macro '{}' takes not more than {} argument(s)", macro.name, n_params);
  }
  std::vector<std::optional<Value>> bound(n_params);
  for (std::size_t i = 0; i < args.positional.size() && i < n_params; ++i) {
    bound[i] = args.positional[i];
  }
  std::vector<std::pair<Value, Value>> extra_kwargs;
  std::optional<Value> caller;
  for (auto& [key, value] : args.keyword) {
    std::size_t i = 0;
    while (i < n_params && macro.params[i].name != key) ++i;
    if (i < n_params) {
      if (bound[i]) fail("macro '{}' got multiple values for argument '{}'", macro.name, key);
      bound[i] = value;
    } else if (key == "caller" && macro.uses_caller) {
      caller = value;
    } else if (macro.uses_kwargs) {
      extra_kwargs.emplace_back(Value::string(key), value);
    } else {
      fail("macro '{}' takes no keyword argument '{}'", macro.name, key);
    }
  }
  for (std::size_t i = 0; i < n_params; ++i) {
    const MacroParam& p = macro.params[i];
    if (bound[i]) {
      scope->set(p.name, *bound[i]);
    } else if (p.default_value) {
      scope->set(p.name, eval(*p.default_value, scope));
    } else {
      scope->set(p.name, Value::undefined(fmt::format("parameter '{}' was not provided", p.name)));
    }
  }
  if (macro.uses_varargs) {
    std::vector<Value> rest;
    for (std::size_t i = n_params; i < args.positional.size(); ++i)
      rest.push_back(args.positional[i]);
    scope->set("varargs", Value::tuple(std::move(rest)));
  }
  if (macro.uses_kwargs) scope->set("kwargs", Value::dict(std::move(extra_kwargs)));
  if (macro.uses_caller) {
    scope->set("caller", caller ? *caller : Value::undefined("No caller defined"));
  }
  std::string out;
  exec_body(macro.body, scope, out);
  return Value::string(std::move(out));
}

// ---------------------------------------------------------------------------------------------
// Expressions

CallArgs Interpreter::eval_args(const ArgsExpr& args, Scope* scope) {
  CallArgs out;
  for (const ExprPtr& e : args.positional) out.positional.push_back(eval(*e, scope));
  if (args.star_args) {
    const Value extra = eval(*args.star_args, scope);
    for (Value& v : items_of(extra)) out.positional.push_back(std::move(v));
  }
  for (const auto& [key, e] : args.keyword) out.keyword.emplace_back(key, eval(*e, scope));
  if (args.star_kwargs) {
    const Value extra = eval(*args.star_kwargs, scope);
    if (!extra.is_dict()) fail("argument after ** must be a mapping, not {}", type_name(extra));
    for (const auto& [k, v] : extra.dict_data().items) {
      if (!k.is_string()) fail("keywords must be strings");
      out.keyword.emplace_back(k.str(), v);
    }
  }
  return out;
}

Value Interpreter::eval_filter(const FilterExpr& f, Scope* scope, const Value* block_input) {
  // Filters that take the template context are never folded by jinja2.
  if (folding_ && (f.name == "map" || f.name == "select" || f.name == "reject" ||
                   f.name == "selectattr" || f.name == "rejectattr")) {
    throw NotConstant{};
  }
  Value input;
  if (f.input == nullptr) {
    input = *block_input;
  } else if (block_input != nullptr && f.input->kind == Expr::Kind::filter) {
    input = eval_filter(static_cast<const FilterExpr&>(*f.input), scope, block_input);
  } else {
    input = eval(*f.input, scope);
  }
  return apply_filter(f.name, input, eval_args(f.args, scope));
}

Value Interpreter::eval(const Expr& expr, Scope* scope) {
  // Inner expressions fold only to values jinja2 can write back as literals (Const.from_untrusted:
  // numbers, strings, None, and containers of those).
  if (expr.fold_candidate && !folding_) {
    if (auto folded = fold_constant(expr); folded && has_safe_repr(*folded)) return *folded;
  }
  return eval_node(expr, scope);
}

namespace {

// Expressions whose value is one of their operands' (or a variable's, or the template's own
// constant), already counted where it was created.
bool passes_a_value_through(const Expr& expr) {
  switch (expr.kind) {
    case Expr::Kind::literal:
    case Expr::Kind::name:
    case Expr::Kind::conditional:
      return true;
    case Expr::Kind::binary: {
      const auto op = static_cast<const BinaryExpr&>(expr).op;
      return op == BinaryExpr::Op::and_ || op == BinaryExpr::Op::or_;
    }
    default:
      return false;
  }
}

}  // namespace

Value Interpreter::eval_node(const Expr& expr, Scope* scope) {
  DepthGuard guard(*this);
  Value v = eval_kind(expr, scope);
  if (!passes_a_value_through(expr)) budget_.charge_created(v.unshared_bytes());
  return v;
}

Value Interpreter::eval_kind(const Expr& expr, Scope* scope) {
  switch (expr.kind) {
    case Expr::Kind::literal:
      return static_cast<const LiteralExpr&>(expr).value;
    case Expr::Kind::name:
      if (folding_) throw NotConstant{};
      return lookup(scope, static_cast<const NameExpr&>(expr).name);
    case Expr::Kind::list: {
      const auto& e = static_cast<const ListExpr&>(expr);
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const ExprPtr& item : e.items) items.push_back(eval(*item, scope));
      return e.tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    case Expr::Kind::dict: {
      const auto& e = static_cast<const DictExpr&>(expr);
      std::vector<std::pair<Value, Value>> items;
      for (const auto& [k, v] : e.items) items.emplace_back(eval(*k, scope), eval(*v, scope));
      return Value::dict(std::move(items));
    }
    case Expr::Kind::attr: {
      const auto& e = static_cast<const AttrExpr&>(expr);
      return getattr(eval(*e.object, scope), e.name);
    }
    case Expr::Kind::item: {
      const auto& e = static_cast<const ItemExpr&>(expr);
      const Value object = eval(*e.object, scope);
      if (e.index->kind == Expr::Kind::slice) {
        return eval_slice(object, static_cast<const SliceExpr&>(*e.index), scope);
      }
      return getitem(object, eval(*e.index, scope));
    }
    case Expr::Kind::slice:
      fail("slice outside of a subscript");
    case Expr::Kind::call: {
      if (folding_) throw NotConstant{};
      const auto& e = static_cast<const CallExpr&>(expr);
      const Value callee = eval(*e.callee, scope);
      return call(callee, eval_args(e.args, scope));
    }
    case Expr::Kind::filter:
      return eval_filter(static_cast<const FilterExpr&>(expr), scope, nullptr);
    case Expr::Kind::test: {
      const auto& e = static_cast<const TestExpr&>(expr);
      const Value input = eval(*e.input, scope);
      return Value::boolean(apply_test(e.name, input, eval_args(e.args, scope)));
    }
    case Expr::Kind::unary: {
      const auto& e = static_cast<const UnaryExpr&>(expr);
      const Value v = eval(*e.operand, scope);
      if (e.op == UnaryExpr::Op::not_) return Value::boolean(!truthy(v));
      if (v.is_undefined()) fail_undefined(v);
      const bool neg = e.op == UnaryExpr::Op::neg;
      if (v.is_float()) return Value::floating(neg ? -v.as_float() : v.as_float());
      if (v.is_int() || v.is_bool()) {
        if (!neg) return Value::integer(v.as_int());
        return Value::integer(checked_sub(0, v.as_int()));
      }
      fail("bad operand type for unary {}: '{}'", neg ? "-" : "+", type_name(v));
    }
    case Expr::Kind::binary: {
      const auto& e = static_cast<const BinaryExpr&>(expr);
      if (e.op == BinaryExpr::Op::and_) {
        Value left = eval(*e.left, scope);
        return truthy(left) ? eval(*e.right, scope) : left;
      }
      if (e.op == BinaryExpr::Op::or_) {
        Value left = eval(*e.left, scope);
        return truthy(left) ? left : eval(*e.right, scope);
      }
      const Value left = eval(*e.left, scope);
      const Value right = eval(*e.right, scope);
      return eval_binary(e.op, left, right);
    }
    case Expr::Kind::concat: {
      const auto& e = static_cast<const ConcatExpr&>(expr);
      std::string out;
      for (const ExprPtr& part : e.parts) {
        const std::string piece = text(eval(*part, scope));
        budget_.check_string(out.size() + piece.size(), "'~'");
        out += piece;
      }
      return Value::string(std::move(out));
    }
    case Expr::Kind::compare: {
      const auto& e = static_cast<const CompareExpr&>(expr);
      Value left = eval(*e.first, scope);
      for (const auto& [op, rhs] : e.rest) {
        Value right = eval(*rhs, scope);
        if (!eval_compare(op, left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case Expr::Kind::conditional: {
      const auto& e = static_cast<const ConditionalExpr&>(expr);
      if (truthy(eval(*e.test, scope))) return eval(*e.then, scope);
      if (e.otherwise) return eval(*e.otherwise, scope);
      if (folding_) throw NotConstant{};  // jinja2 leaves a false test without else to run time
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.",
          expr.line));
    }
  }
  fail("unknown expression");
}

bool Interpreter::eval_compare(CompareExpr::Op op, const Value& a, const Value& b) {
  switch (op) {
    case CompareExpr::Op::eq:
      return equals(a, b);
    case CompareExpr::Op::ne:
      return !equals(a, b);
    case CompareExpr::Op::lt:
      return less(a, b);
    case CompareExpr::Op::gt:
      return less(b, a);
    case CompareExpr::Op::le:
      return less(a, b) || (!less(b, a) && equals(a, b));
    case CompareExpr::Op::ge:
      return less(b, a) || (!less(a, b) && equals(a, b));
    case CompareExpr::Op::in:
    case CompareExpr::Op::not_in:
      // A scan of the container (strings: of their bytes).
      if (b.is_string()) budget_.charge_bytes(static_cast<std::int64_t>(b.str().size()));
      if (b.is_sequence()) budget_.charge_items(static_cast<std::int64_t>(b.items().size()));
      if (b.is_dict()) budget_.charge_items(static_cast<std::int64_t>(b.dict_data().items.size()));
      return contains(b, a) == (op == CompareExpr::Op::in);
  }
  return false;
}

Value Interpreter::eval_binary(BinaryExpr::Op op, const Value& a, const Value& b) {
  // str % x formats first: Python's str.__mod__ accepts any right operand (even Undefined).
  if (op == BinaryExpr::Op::mod && a.is_string()) {
    return Value::string(percent_format(budget_, a.str(), b), a.is_safe());
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool numbers = a.is_number() && b.is_number();
  switch (op) {
    case BinaryExpr::Op::add:
      if (ints) return Value::integer(checked_add(a.as_int(), b.as_int()));
      if (numbers) return Value::floating(a.as_number() + b.as_number());
      if (a.is_string() && b.is_string()) {
        budget_.check_string(a.str().size() + b.str().size(), "str + str");
        // markupsafe: adding to a Markup escapes the plain side and stays Markup.
        if (a.is_safe() || b.is_safe()) {
          return Value::string((a.is_safe() ? a.str() : html_escape(a.str())) +
                                   (b.is_safe() ? b.str() : html_escape(b.str())),
                               true);
        }
        return Value::string(a.str() + b.str());
      }
      if (a.kind() == b.kind() && a.is_sequence()) {
        budget_.check_items(a.items().size() + b.items().size(), "list + list");
        std::vector<Value> items = a.items();
        items.insert(items.end(), b.items().begin(), b.items().end());
        return a.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      if (a.is_string() && !b.is_string()) {
        fail("can only concatenate str (not \"{}\") to str", type_name(b));
      }
      if (a.is_list() && !b.is_list()) {
        fail("can only concatenate list (not \"{}\") to list", type_name(b));
      }
      raise_type_error_operands("+", a, b);
    case BinaryExpr::Op::sub:
      if (ints) return Value::integer(checked_sub(a.as_int(), b.as_int()));
      if (numbers) return Value::floating(a.as_number() - b.as_number());
      raise_type_error_operands("-", a, b);
    case BinaryExpr::Op::mul:
      if (ints) return Value::integer(checked_mul(a.as_int(), b.as_int()));
      if (numbers) return Value::floating(a.as_number() * b.as_number());
      if ((a.is_string() || a.is_sequence()) && (b.is_int() || b.is_bool()))
        return repeat(budget_, a, b.as_int());
      if ((b.is_string() || b.is_sequence()) && (a.is_int() || a.is_bool()))
        return repeat(budget_, b, a.as_int());
      if (a.is_string() || b.is_string()) {
        fail("can't multiply sequence by non-int of type '{}'", type_name(a.is_string() ? b : a));
      }
      raise_type_error_operands("*", a, b);
    case BinaryExpr::Op::div:
      if (numbers) {
        if (b.as_number() == 0.0) fail("division by zero");
        return Value::floating(a.as_number() / b.as_number());
      }
      raise_type_error_operands("/", a, b);
    case BinaryExpr::Op::floordiv:
    case BinaryExpr::Op::mod: {
      const bool is_mod = op == BinaryExpr::Op::mod;
      if (ints) {
        const std::int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) fail("integer division or modulo by zero");
        if (x == std::numeric_limits<std::int64_t>::min() && y == -1) {
          if (!is_mod) fail_overflow();
          return Value::integer(0);
        }
        std::int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          m += y;
          q -= 1;
        }
        return Value::integer(is_mod ? m : q);
      }
      if (numbers) {
        const auto [q, m] = float_divmod(a.as_number(), b.as_number());
        return Value::floating(is_mod ? m : q);
      }
      raise_type_error_operands(is_mod ? "%" : "//", a, b);
    }
    case BinaryExpr::Op::pow: {
      if (ints && b.as_int() >= 0) {
        std::int64_t result = 1, base = a.as_int(), e = b.as_int();
        while (e > 0) {
          if (e & 1) result = checked_mul(result, base);
          e >>= 1;
          if (e > 0) base = checked_mul(base, base);
        }
        return Value::integer(result);
      }
      if (numbers) {
        const double x = a.as_number(), y = b.as_number();
        if (x == 0.0 && y < 0) fail("0.0 cannot be raised to a negative power");
        const double p = std::pow(x, y);
        if (std::isnan(p) && !std::isnan(x) && !std::isnan(y)) {
          fail("a negative number cannot be raised to a fractional power here");
        }
        return Value::floating(p);
      }
      raise_type_error_operands("** or pow()", a, b);
    }
    default:
      break;
  }
  fail("unsupported operator");
}

Value Interpreter::eval_slice(const Value& object, const SliceExpr& slice, Scope* scope) {
  const auto part = [&](const ExprPtr& e) -> std::optional<Value> {
    if (!e) return std::nullopt;
    return eval(*e, scope);
  };
  const std::optional<Value> start_v = part(slice.start), stop_v = part(slice.stop),
                             step_v = part(slice.step);
  // jinja2 compiles slices to plain Python subscripts (not environment.getitem), so a value
  // that cannot be sliced is an error, unless the slice was folded at compile time (see
  // OutputStmt::has_slice), where the sandbox turns TypeErrors into an undefined value.
  if (object.is_undefined()) fail_undefined(object);
  const auto type_error = [&](std::string message) -> Value {
    if (folding_) return Value::undefined(std::move(message));
    fail("{}", message);
  };
  if (object.is_dict()) return type_error("unhashable type: 'slice'");
  if (!(object.is_string() || object.is_sequence())) {
    return type_error(fmt::format("'{}' object is not subscriptable", type_name(object)));
  }
  bool bad_index = false;
  const auto index_of = [&](const std::optional<Value>& v) -> std::optional<std::int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (v->is_int() || v->is_bool()) return v->as_int();
    if (v->is_undefined()) fail_undefined(*v);
    bad_index = true;
    return std::nullopt;
  };
  const auto start_i = index_of(start_v), stop_i = index_of(stop_v), step_i = index_of(step_v);
  if (bad_index) {
    return type_error("slice indices must be integers or None or have an __index__ method");
  }
  const std::int64_t step = step_i.value_or(1);
  if (step == 0) fail("slice step cannot be zero");

  std::u32string cps;
  std::int64_t len;
  if (object.is_string()) {
    budget_.charge_bytes(static_cast<std::int64_t>(object.str().size()));
    cps = utf8_decode(object.str());
    len = static_cast<std::int64_t>(cps.size());
  } else {
    len = static_cast<std::int64_t>(object.items().size());
  }
  const auto adjust = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
    if (!v) return fallback;
    std::int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  const std::int64_t start = adjust(start_i, step < 0 ? len - 1 : 0);
  const std::int64_t stop = adjust(stop_i, step < 0 ? -1 : len);
  std::vector<std::int64_t> picks;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
  if (object.is_string()) {
    std::u32string out;
    for (std::int64_t i : picks) out.push_back(cps[static_cast<std::size_t>(i)]);
    return Value::string(utf8_encode(out), object.is_safe());
  }
  std::vector<Value> out;
  for (std::int64_t i : picks) out.push_back(object.items()[static_cast<std::size_t>(i)]);
  return object.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

// ---------------------------------------------------------------------------------------------
// Services

Value Interpreter::call(const Value& callee, CallArgs args) {
  if (callee.is_callable()) {
    DepthGuard guard(*this);
    return callee.callable_data().fn(*this, args);
  }
  if (callee.is_undefined()) fail_undefined(callee);
  if (callee.is_object()) {
    if (const Value* fn = callee.object_ptr()->find("__call__")) return call(*fn, std::move(args));
  }
  fail("'{}' object is not callable", type_name(callee));
}

Value Interpreter::apply_filter(std::string_view name, const Value& input, CallArgs args) {
  budget_.step();
  if (input.is_string()) budget_.charge_bytes(static_cast<std::int64_t>(input.str().size()));
  const FilterFn fn = find_filter(name);
  if (fn == nullptr) fail("No filter named '{}' found (or not supported here).", name);
  return fn(*this, input, args);
}

bool Interpreter::apply_test(std::string_view name, const Value& input, CallArgs args) {
  budget_.step();
  const TestFn fn = find_test(name);
  if (fn == nullptr) fail("No test named '{}' found (or not supported here).", name);
  return fn(*this, input, args);
}

Value Interpreter::getattr(const Value& object, std::string_view name) {
  switch (object.kind()) {
    case Value::Kind::undefined:
      fail_undefined(object);
    case Value::Kind::dict: {
      budget_.charge_items(static_cast<std::int64_t>(object.dict_data().items.size()));
      if (auto m = find_method(object, name)) return *m;
      if (const Value* v = object.dict_data().find(name)) return *v;
      break;
    }
    case Value::Kind::string:
    case Value::Kind::list:
    case Value::Kind::tuple:
      if (auto m = find_method(object, name)) return *m;
      break;
    case Value::Kind::object:
      if (name != "__call__") {
        if (const Value* v = object.object_ptr()->find(name)) return *v;
      }
      break;
    case Value::Kind::none:
      return Value::undefined(fmt::format("'None' has no attribute '{}'", name));
    default:
      break;
  }
  return Value::undefined(
      fmt::format("'{} object' has no attribute '{}'", type_name(object), name));
}

Value Interpreter::getitem(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::undefined:
      fail_undefined(object);
    case Value::Kind::dict:
      budget_.charge_items(static_cast<std::int64_t>(object.dict_data().items.size()));
      if (hashable(key)) {
        if (const Value* v = object.dict_data().find(key)) return *v;
      }
      break;
    case Value::Kind::list:
    case Value::Kind::tuple:
    case Value::Kind::string:
      if (key.is_int() || key.is_bool()) {
        std::int64_t i = key.as_int();
        if (object.is_string()) {
          budget_.charge_bytes(static_cast<std::int64_t>(object.str().size()));
          const std::u32string cps = utf8_decode(object.str());
          const auto n = static_cast<std::int64_t>(cps.size());
          if (i < 0) i += n;
          if (i < 0 || i >= n) break;
          std::string s;
          utf8_append(s, cps[static_cast<std::size_t>(i)]);
          return Value::string(std::move(s), object.is_safe());
        }
        const auto n = static_cast<std::int64_t>(object.items().size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return object.items()[static_cast<std::size_t>(i)];
        return Value::undefined(
            fmt::format("{} object has no element {}", type_name(object), key.as_int()));
      }
      break;
    default:
      break;
  }
  // jinja2 falls back to the attribute of that name for string keys.
  if (key.is_string() && !object.is_dict()) return getattr(object, key.str());
  if (key.is_string()) {
    if (auto m = find_method(object, key.str())) return *m;
  }
  if (object.is_none())
    return Value::undefined(fmt::format("'None' has no attribute {}", repr(key)));
  return Value::undefined(
      fmt::format("'{} object' has no attribute {}", type_name(object), repr(key)));
}

}  // namespace fp8rl::jinja
