#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <array>

#include "tokenizer/jinja/lexer.h"

namespace fp8rl::jinja {
namespace {

// Every filter and test jinja2 3.1 ships (whether or not this interpreter implements it): an
// unknown name is a compile-time error in jinja2, a name it knows fails only when run.
constexpr std::array<std::string_view, 54> kJinjaFilters = {
    "abs",    "attr",       "batch",       "capitalize", "center",   "count",
    "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
    "first",  "float",      "forceescape", "format",     "groupby",  "indent",
    "int",    "items",      "join",        "last",       "length",   "list",
    "lower",  "map",        "max",         "min",        "pprint",   "random",
    "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
    "select", "selectattr", "slice",       "sort",       "string",   "striptags",
    "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
    "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr"};
constexpr std::array<std::string_view, 39> kJinjaTests = {
    "boolean", "callable", "defined",  "divisibleby", "eq",       "equalto", "escaped",
    "even",    "false",    "filter",   "float",       "ge",       "gt",      "greaterthan",
    "in",      "integer",  "iterable", "le",          "lessthan", "lower",   "lt",
    "mapping", "ne",       "none",     "number",      "odd",      "sameas",  "sequence",
    "string",  "test",     "true",     "undefined",   "upper",    "==",      "!=",
    "<",       "<=",       ">",        ">="};

template <std::size_t N>
bool listed(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

[[noreturn]] void syntax_error(int line, const std::string& message) {
  throw TemplateError(TemplateError::Kind::syntax, message, line);
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::text:
      return "template data";
    case TokenKind::var_begin:
      return "begin of print statement";
    case TokenKind::var_end:
      return "end of print statement";
    case TokenKind::block_begin:
      return "begin of statement block";
    case TokenKind::block_end:
      return "end of statement block";
    case TokenKind::eof:
      return "end of template";
    case TokenKind::string:
      return "string";
    case TokenKind::integer:
    case TokenKind::floating:
      return "number";
    default:
      return "'" + t.value + "'";
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  std::unique_ptr<Template> run() {
    auto tpl = std::make_unique<Template>();
    tpl->body = parse_body({});
    return tpl;
  }

 private:
  // ---- token stream ----
  const Token& cur() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool is_op(std::string_view op) const { return cur().kind == TokenKind::op && cur().value == op; }
  bool is_name(std::string_view n) const {
    return cur().kind == TokenKind::name && cur().value == n;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) {
      syntax_error(cur().line, fmt::format("expected token '{}', got {}", op, describe(cur())));
    }
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::name) {
      syntax_error(cur().line, fmt::format("expected a name, got {}", describe(cur())));
    }
    return next().value;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::block_end) {
      syntax_error(cur().line,
                   fmt::format("expected token 'end of statement block', got {}", describe(cur())));
    }
    next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) {
        syntax_error(p_.cur().line,
                     fmt::format("template nested deeper than {} levels", kMaxParseDepth));
      }
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  // Each link of a left-nested chain (a.b.c, x|f|g, 1 + 2 + 3) is one more level of the tree
  // that evaluating and freeing it will recurse through.
  class ChainDepth {
   public:
    explicit ChainDepth(Parser& p) : p_(p) {}
    ~ChainDepth() { p_.depth_ -= links_; }
    ChainDepth(const ChainDepth&) = delete;
    ChainDepth& operator=(const ChainDepth&) = delete;
    void add() {
      ++links_;
      if (++p_.depth_ > kMaxParseDepth) {
        syntax_error(p_.cur().line,
                     fmt::format("template nested deeper than {} levels", kMaxParseDepth));
      }
    }

   private:
    Parser& p_;
    int links_ = 0;
  };

  // Saves a flag and restores it at scope exit.
  template <class T>
  struct Restore {
    Restore(T& ref, T value) : ref_(ref), old_(ref) { ref_ = value; }
    ~Restore() { ref_ = old_; }
    T& ref_;
    T old_;
  };

  // ---- unknown filter/test names (see parser.h) ----
  void note_unknown(const std::string& kind, const std::string& name, int line) {
    pending_unknown_.push_back({fmt::format("No {} named '{}'.", kind, name), line});
  }
  void flush_unknown() {
    if (!soft_ && !pending_unknown_.empty()) {
      syntax_error(pending_unknown_.front().second, pending_unknown_.front().first);
    }
    pending_unknown_.clear();
  }

  // ---- statements ----
  // Parses until a block tag whose name is in `end_names` (left unconsumed, after its {%), or eof.
  Body parse_body(std::initializer_list<std::string_view> end_names) {
    DepthGuard guard(*this);
    Restore<int> blocks(block_depth_, block_depth_ + 1);
    if (block_depth_ > kMaxBlockDepth) {
      syntax_error(cur().line, fmt::format("blocks nested deeper than {} levels", kMaxBlockDepth));
    }
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TokenKind::eof) {
        if (end_names.size() > 0) {
          std::string names;
          for (auto n : end_names) names += (names.empty() ? "'" : " or '") + std::string(n) + "'";
          syntax_error(t.line,
                       "Unexpected end of template. Jinja was looking for the following tags: " +
                           names + ".");
        }
        return body;
      }
      if (t.kind == TokenKind::text) {
        body.push_back(std::make_unique<TextStmt>(t.line, t.value));
        next();
      } else if (t.kind == TokenKind::var_begin) {
        const int line = next().line;
        ExprPtr e = parse_tuple(false, true, {}, false);
        if (cur().kind != TokenKind::var_end) {
          syntax_error(cur().line, fmt::format("expected token 'end of print statement', got {}",
                                               describe(cur())));
        }
        next();
        flush_unknown();
        annotate_root(e.get());
        body.push_back(std::make_unique<OutputStmt>(line, std::move(e)));
      } else if (t.kind == TokenKind::block_begin) {
        next();
        if (cur().kind == TokenKind::name &&
            std::find(end_names.begin(), end_names.end(), cur().value) != end_names.end()) {
          return body;
        }
        body.push_back(parse_statement());
        expect_block_end();
      } else {
        syntax_error(t.line, fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  // After a statement header: optional ':' then %}, the body, and the end tag's name consumed
  // when drop_needle.
  Body parse_statements(std::initializer_list<std::string_view> end_names, bool drop_needle) {
    skip_op(":");
    expect_block_end();
    Body body = parse_body(end_names);
    if (drop_needle) next();
    return body;
  }

  StmtPtr parse_statement() {
    const Token& t = cur();
    if (t.kind != TokenKind::name) syntax_error(t.line, "tag name expected");
    const std::string& n = t.value;
    if (n == "if") return parse_if();
    if (n == "for") return parse_for();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "call") return parse_call_block();
    if (n == "filter") return parse_filter_block();
    if (n == "with") return parse_with();
    if (n == "print") {
      const int line = next().line;
      auto s = std::make_unique<OutputStmt>(line, parse_tuple(false, true, {}, false));
      flush_unknown();
      annotate_root(s->expr.get());
      return s;
    }
    if (n == "break" || n == "continue") {
      const int line = next().line;
      if (loop_depth_ == 0) syntax_error(line, "'" + n + "' outside loop");
      return std::make_unique<LoopControlStmt>(line, n == "break");
    }
    if (n == "generation") {
      auto s = std::make_unique<GenerationStmt>(next().line);
      // The body becomes a caller() function in jinja2: no loop around it to break out of.
      Restore<int> loops(loop_depth_, 0);
      s->body = parse_statements({"endgeneration"}, true);
      return s;
    }
    if (n == "block" || n == "extends" || n == "include" || n == "import" || n == "from" ||
        n == "autoescape") {
      syntax_error(t.line, "the '" + n + "' tag is not supported in chat templates");
    }
    // Includes end tags and elif/else that no open block expects.
    syntax_error(t.line, "Encountered unknown tag '" + n + "'.");
  }

  StmtPtr parse_if() {
    auto s = std::make_unique<IfStmt>(next().line);
    Restore<bool> soft(soft_, true);
    ExprPtr test = parse_tuple(false, false, {}, false);
    flush_unknown();
    annotate_root(test.get());
    while (true) {
      Body body = parse_statements({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(test), std::move(body));
      const std::string tag = next().value;
      if (tag == "elif") {
        test = parse_tuple(false, false, {}, false);
        flush_unknown();
        annotate_root(test.get());
        continue;
      }
      if (tag == "else") s->otherwise = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_for() {
    auto s = std::make_unique<ForStmt>(next().line);
    s->target = parse_target(false, "in");
    if (!skip_name("in")) {
      syntax_error(cur().line, fmt::format("expected token 'in', got {}", describe(cur())));
    }
    s->iterable = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->condition = parse_expression(true);
    if (skip_name("recursive")) s->recursive = true;
    flush_unknown();
    annotate_root(s->iterable.get());
    annotate_root(s->condition.get());
    Restore<bool> soft(soft_, false);
    Restore<int> loops(loop_depth_, loop_depth_ + 1);
    s->body = parse_statements({"endfor", "else"}, false);
    if (next().value == "else") {
      Restore<int> no_loop(loop_depth_, loop_depth_ - 1);
      s->otherwise = parse_statements({"endfor"}, true);
    }
    return s;
  }

  StmtPtr parse_set() {
    const int line = next().line;
    Target target = parse_target(true, "");
    if (skip_op("=")) {
      auto s = std::make_unique<SetStmt>(line);
      s->target = std::move(target);
      s->value = parse_tuple(false, true, {}, false);
      flush_unknown();
      annotate_root(s->value.get());
      return s;
    }
    auto s = std::make_unique<SetBlockStmt>(line);
    s->target = std::move(target);
    Restore<bool> soft(soft_, false);
    if (is_op("|")) s->filter = parse_filter(nullptr, false);
    flush_unknown();
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  // for/set/with targets: a name, names separated by commas (optionally in parentheses), or
  // with_namespace, name.attr.
  Target parse_target(bool with_namespace, std::string_view end_name) {
    Target target;
    const int line = cur().line;
    if (with_namespace && cur().kind == TokenKind::name && look().kind == TokenKind::op &&
        look().value == ".") {
      target.names.push_back(next().value);
      next();
      target.attr = expect_name();
      return target;
    }
    const bool parens = skip_op("(");
    while (true) {
      if (cur().kind != TokenKind::name) {
        syntax_error(cur().line, fmt::format("can't assign to {}", describe(cur())));
      }
      const std::string& n = cur().value;
      if (n == "true" || n == "false" || n == "True" || n == "False" || n == "none" ||
          n == "None") {
        syntax_error(line, "can't assign to 'const'");
      }
      target.names.push_back(next().value);
      if (!skip_op(",")) break;
      target.unpack = true;
      if ((parens && is_op(")")) || (!end_name.empty() && is_name(end_name)) || is_op("=")) break;
    }
    if (parens) expect_op(")");
    return target;
  }

  StmtPtr parse_macro() {
    auto s = std::make_unique<MacroStmt>(next().line);
    s->name = expect_name();
    parse_signature(s->params);
    Restore<bool> soft(soft_, false);
    Restore<int> loops(loop_depth_, 0);
    open_macros_.push_back(s.get());
    s->body = parse_statements({"endmacro"}, true);
    open_macros_.pop_back();
    return s;
  }

  void parse_signature(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
        annotate_root(p.default_value.get());
      } else if (!params.empty() && params.back().default_value) {
        syntax_error(cur().line, "non-default argument follows default argument");
      }
      params.push_back(std::move(p));
    }
    next();
  }

  StmtPtr parse_call_block() {
    auto s = std::make_unique<CallBlockStmt>(next().line);
    s->caller = std::make_unique<MacroStmt>(s->line);
    s->caller->name = "caller";
    if (is_op("(")) parse_signature(s->caller->params);
    ExprPtr call = parse_expression(true);
    if (call->kind != Expr::Kind::call) syntax_error(s->line, "expected call");
    s->call = std::move(call);
    flush_unknown();
    annotate_root(s->call.get());
    Restore<bool> soft(soft_, false);
    Restore<int> loops(loop_depth_, 0);
    open_macros_.push_back(s->caller.get());
    s->caller->body = parse_statements({"endcall"}, true);
    open_macros_.pop_back();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = std::make_unique<FilterBlockStmt>(next().line);
    Restore<bool> soft(soft_, false);
    s->filter = parse_filter(nullptr, true);
    flush_unknown();
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  StmtPtr parse_with() {
    auto s = std::make_unique<WithStmt>(next().line);
    while (cur().kind != TokenKind::block_end) {
      if (!s->assignments.empty()) expect_op(",");
      Target t = parse_target(false, "");
      expect_op("=");
      s->assignments.emplace_back(std::move(t), parse_expression(true));
      annotate_root(s->assignments.back().second.get());
    }
    flush_unknown();
    Restore<bool> soft(soft_, false);
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  // ---- expressions ----
  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const Token& t = cur();
    if (t.kind == TokenKind::var_end || t.kind == TokenKind::block_end || is_op(")")) return true;
    for (auto n : extra_end) {
      if (is_name(n)) return true;
    }
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr,
                      std::initializer_list<std::string_view> extra_end, bool explicit_parens) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) {
        syntax_error(cur().line, fmt::format("Expected an expression, got {}", describe(cur())));
      }
    }
    auto e = std::make_unique<ListExpr>(line, true);
    e->items = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    const std::size_t mark = pending_unknown_.size();
    int line = cur().line;
    ExprPtr expr = parse_or();
    ChainDepth chain(*this);
    while (skip_name("if")) {
      chain.add();
      auto c = std::make_unique<ConditionalExpr>(line);
      c->then = std::move(expr);
      c->test = parse_or();
      if (skip_name("else")) c->otherwise = parse_condexpr();
      // jinja2 compiles a conditional expression in a "soft" frame: unknown filters in it fail
      // only when they run.
      pending_unknown_.resize(mark);
      expr = std::move(c);
      line = cur().line;
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    ChainDepth chain(*this);
    while (is_name("or")) {
      chain.add();
      const int line = next().line;
      left = std::make_unique<BinaryExpr>(line, BinaryExpr::Op::or_, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    ChainDepth chain(*this);
    while (is_name("and")) {
      chain.add();
      const int line = next().line;
      left = std::make_unique<BinaryExpr>(line, BinaryExpr::Op::and_, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const int line = next().line;
      return std::make_unique<UnaryExpr>(line, UnaryExpr::Op::not_, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr expr = parse_math1();
    std::vector<std::pair<CompareExpr::Op, ExprPtr>> ops;
    while (true) {
      CompareExpr::Op op;
      if (is_op("==")) {
        op = CompareExpr::Op::eq;
      } else if (is_op("!=")) {
        op = CompareExpr::Op::ne;
      } else if (is_op("<")) {
        op = CompareExpr::Op::lt;
      } else if (is_op("<=")) {
        op = CompareExpr::Op::le;
      } else if (is_op(">")) {
        op = CompareExpr::Op::gt;
      } else if (is_op(">=")) {
        op = CompareExpr::Op::ge;
      } else if (is_name("in")) {
        op = CompareExpr::Op::in;
      } else if (is_name("not") && look().kind == TokenKind::name && look().value == "in") {
        next();
        op = CompareExpr::Op::not_in;
      } else {
        break;
      }
      next();
      ops.emplace_back(op, parse_math1());
    }
    if (ops.empty()) return expr;
    auto c = std::make_unique<CompareExpr>(line, std::move(expr));
    c->rest = std::move(ops);
    return c;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    ChainDepth chain(*this);
    while (is_op("+") || is_op("-")) {
      chain.add();
      const auto op = cur().value == "+" ? BinaryExpr::Op::add : BinaryExpr::Op::sub;
      const int line = next().line;
      left = std::make_unique<BinaryExpr>(line, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto c = std::make_unique<ConcatExpr>(line);
    c->parts.push_back(std::move(first));
    while (skip_op("~")) c->parts.push_back(parse_math2());
    return c;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    ChainDepth chain(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      chain.add();
      const std::string& v = cur().value;
      const auto op = v == "*"    ? BinaryExpr::Op::mul
                      : v == "/"  ? BinaryExpr::Op::div
                      : v == "//" ? BinaryExpr::Op::floordiv
                                  : BinaryExpr::Op::mod;
      const int line = next().line;
      left = std::make_unique<BinaryExpr>(line, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    ChainDepth chain(*this);
    while (is_op("**")) {
      chain.add();
      const int line = next().line;
      left = std::make_unique<BinaryExpr>(line, BinaryExpr::Op::pow, std::move(left),
                                          parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const int line = cur().line;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const auto op = cur().value == "-" ? UnaryExpr::Op::neg : UnaryExpr::Op::pos;
      next();
      node = std::make_unique<UnaryExpr>(line, op, parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token& t = cur();
    const int line = t.line;
    switch (t.kind) {
      case TokenKind::name: {
        ExprPtr node;
        if (t.value == "true" || t.value == "True") {
          node = std::make_unique<LiteralExpr>(line, Value::boolean(true));
        } else if (t.value == "false" || t.value == "False") {
          node = std::make_unique<LiteralExpr>(line, Value::boolean(false));
        } else if (t.value == "none" || t.value == "None") {
          node = std::make_unique<LiteralExpr>(line, Value::none());
        } else {
          if (t.value == "varargs" || t.value == "kwargs" || t.value == "caller") {
            for (MacroStmt* m : open_macros_) {
              if (t.value == "varargs") m->uses_varargs = true;
              if (t.value == "kwargs") m->uses_kwargs = true;
              if (t.value == "caller") m->uses_caller = true;
            }
          }
          node = std::make_unique<NameExpr>(line, t.value);
        }
        next();
        return node;
      }
      case TokenKind::string: {
        std::string s = next().value;
        while (cur().kind == TokenKind::string) s += next().value;  // 'a' 'b' concatenates
        return std::make_unique<LiteralExpr>(line, Value::string(std::move(s)));
      }
      case TokenKind::integer:
        return std::make_unique<LiteralExpr>(line, Value::integer(next().int_value));
      case TokenKind::floating:
        return std::make_unique<LiteralExpr>(line, Value::floating(next().float_value));
      case TokenKind::op:
        if (t.value == "(") {
          next();
          ExprPtr e = parse_tuple(false, true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.value == "[") return parse_list();
        if (t.value == "{") return parse_dict();
        break;
      default:
        break;
    }
    syntax_error(line, fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr parse_list() {
    auto e = std::make_unique<ListExpr>(next().line, false);
    while (!is_op("]")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("]")) break;
      e->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    auto e = std::make_unique<DictExpr>(next().line);
    while (!is_op("}")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      e->items.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    ChainDepth chain(*this);
    while (true) {
      chain.add();
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    ChainDepth chain(*this);
    while (true) {
      chain.add();
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    DepthGuard guard(*this);
    const Token& t = next();
    const int line = t.line;
    if (t.value == ".") {
      const Token& attr = cur();
      if (attr.kind == TokenKind::name) {
        return std::make_unique<AttrExpr>(line, std::move(node), next().value);
      }
      if (attr.kind != TokenKind::integer) syntax_error(attr.line, "expected name or number");
      auto index = std::make_unique<LiteralExpr>(attr.line, Value::integer(next().int_value));
      return std::make_unique<ItemExpr>(line, std::move(node), std::move(index));
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.empty()) syntax_error(line, "expected subscript expression");
    ExprPtr index;
    if (args.size() == 1) {
      index = std::move(args[0]);
    } else {
      auto tuple = std::make_unique<ListExpr>(line, true);
      tuple->items = std::move(args);
      index = std::move(tuple);
    }
    return std::make_unique<ItemExpr>(line, std::move(node), std::move(index));
  }

  // Sets Expr::fold_candidate over a finished expression tree. `no_names` is false when the
  // expression reads variables or calls something (never constant); a conditional's branches
  // and the right side of and/or are judged when they run, as jinja2 folds them lazily.
  struct FoldInfo {
    bool slice = false;
    bool no_names = true;
  };
  static FoldInfo annotate(Expr& e) {
    FoldInfo info;
    const auto add = [&](Expr* x) {
      if (x == nullptr) return;
      const FoldInfo sub = annotate(*x);
      info.slice = info.slice || sub.slice;
      info.no_names = info.no_names && sub.no_names;
    };
    const auto add_args = [&](ArgsExpr& a) {
      for (auto& x : a.positional) add(x.get());
      for (auto& kv : a.keyword) add(kv.second.get());
      add(a.star_args.get());
      add(a.star_kwargs.get());
    };
    switch (e.kind) {
      case Expr::Kind::literal:
        break;
      case Expr::Kind::name:
        info.no_names = false;
        break;
      case Expr::Kind::slice: {
        auto& x = static_cast<SliceExpr&>(e);
        info.slice = true;
        add(x.start.get());
        add(x.stop.get());
        add(x.step.get());
        break;
      }
      case Expr::Kind::list:
        for (auto& x : static_cast<ListExpr&>(e).items) add(x.get());
        break;
      case Expr::Kind::dict:
        for (auto& [k, v] : static_cast<DictExpr&>(e).items) {
          add(k.get());
          add(v.get());
        }
        break;
      case Expr::Kind::attr:
        add(static_cast<AttrExpr&>(e).object.get());
        break;
      case Expr::Kind::item:
        add(static_cast<ItemExpr&>(e).object.get());
        add(static_cast<ItemExpr&>(e).index.get());
        break;
      case Expr::Kind::call: {
        auto& c = static_cast<CallExpr&>(e);
        add(c.callee.get());
        add_args(c.args);
        info.no_names = false;
        break;
      }
      case Expr::Kind::filter: {
        auto& f = static_cast<FilterExpr&>(e);
        add(f.input.get());
        add_args(f.args);
        if (f.input == nullptr || f.name == "map" || f.name == "select" || f.name == "reject" ||
            f.name == "selectattr" || f.name == "rejectattr") {
          info.no_names = false;
        }
        break;
      }
      case Expr::Kind::test:
        add(static_cast<TestExpr&>(e).input.get());
        add_args(static_cast<TestExpr&>(e).args);
        break;
      case Expr::Kind::unary:
        add(static_cast<UnaryExpr&>(e).operand.get());
        break;
      case Expr::Kind::binary: {
        auto& b = static_cast<BinaryExpr&>(e);
        add(b.left.get());
        const bool left_no_names = info.no_names;
        add(b.right.get());
        // `and`/`or` fold lazily too: the right side may never be looked at.
        if (b.op == BinaryExpr::Op::and_ || b.op == BinaryExpr::Op::or_) {
          info.no_names = left_no_names;
        }
        break;
      }
      case Expr::Kind::concat:
        for (auto& x : static_cast<ConcatExpr&>(e).parts) add(x.get());
        break;
      case Expr::Kind::compare: {
        auto& c = static_cast<CompareExpr&>(e);
        add(c.first.get());
        for (auto& [op, x] : c.rest) add(x.get());
        break;
      }
      case Expr::Kind::conditional: {
        auto& c = static_cast<ConditionalExpr&>(e);
        add(c.test.get());
        const bool test_no_names = info.no_names;
        add(c.then.get());
        add(c.otherwise.get());
        info.no_names = test_no_names;
        break;
      }
    }
    e.fold_candidate = info.slice && info.no_names && e.kind != Expr::Kind::slice;
    return info;
  }
  static void annotate_root(Expr* e) {
    if (e != nullptr) annotate(*e);
  }

  ExprPtr parse_subscribed() {
    const int line = cur().line;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();  // ':'
    auto slice = std::make_unique<SliceExpr>(line);
    slice->start = std::move(start);
    if (!is_op(":") && !is_op("]") && !is_op(",")) slice->stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) slice->step = parse_expression(true);
    }
    return slice;
  }

  void parse_call_args(ArgsExpr& args) {
    const int line = cur().line;
    expect_op("(");
    bool require_comma = false;
    const auto ensure = [&](bool ok) {
      if (!ok) syntax_error(line, "invalid syntax for function call expression");
    };
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (skip_op("*")) {
        ensure(!args.star_args && !args.star_kwargs);
        args.star_args = parse_expression(true);
      } else if (skip_op("**")) {
        ensure(!args.star_kwargs);
        args.star_kwargs = parse_expression(true);
      } else if (cur().kind == TokenKind::name && look().kind == TokenKind::op &&
                 look().value == "=") {
        ensure(!args.star_kwargs);
        std::string key = next().value;
        next();
        args.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!args.star_args && !args.star_kwargs && args.keyword.empty());
        args.positional.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    DepthGuard guard(*this);
    auto c = std::make_unique<CallExpr>(cur().line, std::move(callee));
    parse_call_args(c->args);
    return c;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) {
      name += '.';
      name += expect_name();
    }
    return name;
  }

  // `|name(args)|...`; with start_inline the first filter has no leading '|'.
  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    ChainDepth chain(*this);
    while (is_op("|") || start_inline) {
      chain.add();
      if (!start_inline) next();
      start_inline = false;
      const int line = cur().line;
      std::string name = dotted_name();
      if (!listed(kJinjaFilters, name)) note_unknown("filter", name, line);
      auto f = std::make_unique<FilterExpr>(line, std::move(node), std::move(name));
      if (is_op("(")) parse_call_args(f->args);
      node = std::move(f);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    DepthGuard guard(*this);
    const int line = next().line;  // 'is'
    const bool negated = skip_name("not");
    std::string name = dotted_name();
    if (!listed(kJinjaTests, name)) note_unknown("test", name, line);
    auto t = std::make_unique<TestExpr>(line, std::move(node), std::move(name));
    if (is_op("(")) {
      parse_call_args(t->args);
    } else if ((cur().kind == TokenKind::name || cur().kind == TokenKind::string ||
                cur().kind == TokenKind::integer || cur().kind == TokenKind::floating ||
                is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) syntax_error(cur().line, "You cannot chain multiple tests with is");
      t->args.positional.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return t;
    return std::make_unique<UnaryExpr>(line, UnaryExpr::Op::not_, std::move(t));
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int block_depth_ = 0;
  bool soft_ = false;
  std::vector<std::pair<std::string, int>> pending_unknown_;
  std::vector<MacroStmt*> open_macros_;
};

}  // namespace

std::unique_ptr<Template> parse_template(std::string_view source) {
  return Parser(tokenize(source)).run();
}

}  // namespace fp8rl::jinja
