// The syntax tree of a template: expressions and statements as jinja2's parser builds them.
// Nodes are plain data; the Interpreter walks them. Every node carries its template line for
// error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace fp8rl::jinja {

struct Expr {
  enum class Kind {
    literal,
    name,
    list,  // list or tuple literal
    dict,
    attr,
    item,
    slice,
    call,
    filter,
    test,
    unary,
    binary,
    concat,
    compare,
    conditional
  };
  Expr(Kind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
  Kind kind;
  int line;
  // jinja2's compiler folds constant expressions (as_const) and, in a {{ }}, whole constant
  // outputs. Folding differs from running only where a slice of something that cannot be sliced
  // is involved: folded, the sandbox's getitem makes it undefined; at run time it raises. So
  // expressions that contain a slice and may be constant are tried as constants first.
  bool fold_candidate = false;
};
using ExprPtr = std::unique_ptr<Expr>;

struct LiteralExpr : Expr {
  LiteralExpr(int l, Value v) : Expr(Kind::literal, l), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(int l, std::string n) : Expr(Kind::name, l), name(std::move(n)) {}
  std::string name;
};

struct ListExpr : Expr {
  ListExpr(int l, bool t) : Expr(Kind::list, l), tuple(t) {}
  std::vector<ExprPtr> items;
  bool tuple;
};

struct DictExpr : Expr {
  explicit DictExpr(int l) : Expr(Kind::dict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct AttrExpr : Expr {  // object.name
  AttrExpr(int l, ExprPtr o, std::string n)
      : Expr(Kind::attr, l), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};

struct ItemExpr : Expr {  // object[index]; index may be a SliceExpr
  ItemExpr(int l, ExprPtr o, ExprPtr i)
      : Expr(Kind::item, l), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;
};

struct SliceExpr : Expr {  // start:stop:step, each part optional
  explicit SliceExpr(int l) : Expr(Kind::slice, l) {}
  ExprPtr start, stop, step;
};

struct ArgsExpr {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star_args;    // *args
  ExprPtr star_kwargs;  // **kwargs
};

struct CallExpr : Expr {
  CallExpr(int l, ExprPtr c) : Expr(Kind::call, l), callee(std::move(c)) {}
  ExprPtr callee;
  ArgsExpr args;
};

// input|name(args). `input` is null for the filters of {% filter %} and {% set x | f %} blocks,
// whose input is the rendered body.
struct FilterExpr : Expr {
  FilterExpr(int l, ExprPtr i, std::string n)
      : Expr(Kind::filter, l), input(std::move(i)), name(std::move(n)) {}
  ExprPtr input;
  std::string name;
  ArgsExpr args;
};

struct TestExpr : Expr {  // input is name(args); `is not` wraps it in a `not`
  TestExpr(int l, ExprPtr i, std::string n)
      : Expr(Kind::test, l), input(std::move(i)), name(std::move(n)) {}
  ExprPtr input;
  std::string name;
  ArgsExpr args;
};

struct UnaryExpr : Expr {
  enum class Op { neg, pos, not_ };
  UnaryExpr(int l, Op o, ExprPtr e) : Expr(Kind::unary, l), op(o), operand(std::move(e)) {}
  Op op;
  ExprPtr operand;
};

struct BinaryExpr : Expr {
  enum class Op { add, sub, mul, div, floordiv, mod, pow, and_, or_ };
  BinaryExpr(int l, Op o, ExprPtr a, ExprPtr b)
      : Expr(Kind::binary, l), op(o), left(std::move(a)), right(std::move(b)) {}
  Op op;
  ExprPtr left, right;
};

struct ConcatExpr : Expr {  // a ~ b ~ c
  explicit ConcatExpr(int l) : Expr(Kind::concat, l) {}
  std::vector<ExprPtr> parts;
};

struct CompareExpr : Expr {  // a < b == c: chained as in Python
  enum class Op { eq, ne, lt, le, gt, ge, in, not_in };
  CompareExpr(int l, ExprPtr f) : Expr(Kind::compare, l), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<Op, ExprPtr>> rest;
};

struct ConditionalExpr : Expr {  // then if test else otherwise (otherwise may be null)
  explicit ConditionalExpr(int l) : Expr(Kind::conditional, l) {}
  ExprPtr test, then, otherwise;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    text,
    output,
    if_,
    for_,
    set,
    set_block,
    macro,
    call_block,
    filter_block,
    with,
    break_,
    continue_,
    generation
  };
  Stmt(Kind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
  Kind kind;
  int line;
};

struct TextStmt : Stmt {
  TextStmt(int l, std::string t) : Stmt(Kind::text, l), text(std::move(t)) {}
  std::string text;
};

struct OutputStmt : Stmt {  // {{ expr }}
  OutputStmt(int l, ExprPtr e) : Stmt(Kind::output, l), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(int l) : Stmt(Kind::if_, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if and elifs
  Body otherwise;
};

// Assignment target: one name, names to unpack (`a, b`), or a namespace attribute (`ns.x`).
struct Target {
  std::vector<std::string> names;
  bool unpack = false;
  std::string attr;  // non-empty: names[0].attr
};

struct ForStmt : Stmt {
  explicit ForStmt(int l) : Stmt(Kind::for_, l) {}
  Target target;
  ExprPtr iterable;
  ExprPtr condition;  // for x in y if condition
  bool recursive = false;
  Body body;
  Body otherwise;
};

struct SetStmt : Stmt {  // {% set target = value %}
  SetStmt(int l) : Stmt(Kind::set, l) {}
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {  // {% set target | filters %}body{% endset %}
  SetBlockStmt(int l) : Stmt(Kind::set_block, l) {}
  Target target;
  ExprPtr filter;  // may be null
  Body body;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct MacroStmt : Stmt {
  MacroStmt(int l) : Stmt(Kind::macro, l) {}
  std::string name;
  std::vector<MacroParam> params;
  Body body;
  // As jinja2 decides: a macro accepts extra positional/keyword arguments only when its body
  // refers to `varargs`/`kwargs`.
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
};

struct CallBlockStmt : Stmt {  // {% call(params) macro(args) %}body{% endcall %}
  CallBlockStmt(int l) : Stmt(Kind::call_block, l) {}
  std::unique_ptr<MacroStmt> caller;  // the body as a macro named "caller"
  ExprPtr call;                       // a CallExpr
};

struct FilterBlockStmt : Stmt {
  FilterBlockStmt(int l) : Stmt(Kind::filter_block, l) {}
  ExprPtr filter;
  Body body;
};

struct WithStmt : Stmt {
  WithStmt(int l) : Stmt(Kind::with, l) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};

struct LoopControlStmt : Stmt {
  LoopControlStmt(int l, bool is_break) : Stmt(is_break ? Kind::break_ : Kind::continue_, l) {}
};

// HF transformers' {% generation %} tag (its AssistantTracker extension): renders the body.
struct GenerationStmt : Stmt {
  explicit GenerationStmt(int l) : Stmt(Kind::generation, l) {}
  Body body;
};

struct Template {
  Body body;
};

}  // namespace fp8rl::jinja
