//! A symbolic number: the collision operators run on it once, recording every operation in order,
//! and the recording is printed as the CUDA C of the kernels' collision (or evaluated, to prove that
//! the printed code computes what the CPU module computes).
//!
//! This is how one Rust function is the single source of a rule for both modules: the CPU module
//! instantiates it with its lanes, the CUDA module with [`Sym`]. lbmpy does the same with SymPy and a
//! C printer; here the "symbolic algebra" is the Rust function itself, so the printed code has the
//! operations of the CPU code in the CPU code's order, rounded the same way.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::ops::{Add, Div, Mul, Neg, Sub};

use super::arith::Arith;
use crate::real::Real;

/// One recorded value.
#[derive(Clone, Debug, PartialEq)]
enum Node {
    /// A value read by the generated code (`g[3]`, a force component), printed as named.
    Input(String),
    /// A literal, rounded to the kernel's precision where it is used (as `Arith::c` rounds it).
    Const(f64),
    /// A named run constant (index into [`Recording::params`]), defined by the prelude.
    Param(usize),
    Add(u32, u32),
    Sub(u32, u32),
    Mul(u32, u32),
    Div(u32, u32),
    Neg(u32),
    Sqrt(u32),
}

/// Everything recorded while a rule ran on [`Sym`] values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recording {
    nodes: Vec<Node>,
    /// Named run constants with their values, in first-use order.
    params: Vec<(String, f64)>,
}

thread_local! {
    static TAPE: RefCell<Option<Recording>> = const { RefCell::new(None) };
}

/// A recorded value: an index into the recording of the current thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sym(u32);

fn push(n: Node) -> Sym {
    TAPE.with(|t| {
        let mut t = t.borrow_mut();
        let rec = t
            .as_mut()
            .expect("a Sym operation outside symbolic::record (a broken invariant of the caller)");
        rec.nodes.push(n);
        Sym((rec.nodes.len() - 1) as u32)
    })
}

/// Runs `f` with a fresh recording and returns its result with what it recorded. Recordings do not
/// nest.
pub fn record<R>(f: impl FnOnce() -> R) -> (R, Recording) {
    TAPE.with(|t| {
        let prev = t.borrow_mut().replace(Recording::default());
        assert!(prev.is_none(), "symbolic recordings do not nest");
    });
    // Take the recording back even if `f` panics, so the thread can record again.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            TAPE.with(|t| t.borrow_mut().take());
        }
    }
    let reset = Reset;
    let r = f();
    let rec = TAPE.with(|t| t.borrow_mut().take()).unwrap_or_default();
    drop(reset);
    (r, rec)
}

impl Sym {
    /// A value the generated code reads, printed verbatim (`g[3]`).
    pub fn input(name: impl Into<String>) -> Sym {
        push(Node::Input(name.into()))
    }
    /// A named run constant with its value (the prelude defines it; the evaluator uses the value).
    /// The same name always means the same value within one recording.
    pub fn param(name: &str, value: f64) -> Sym {
        TAPE.with(|t| {
            let mut t = t.borrow_mut();
            let rec = t.as_mut().expect("Sym::param outside symbolic::record");
            let k = match rec.params.iter().position(|(n, _)| n == name) {
                Some(k) => {
                    assert_eq!(
                        rec.params[k].1.to_bits(),
                        value.to_bits(),
                        "param {name} given two values"
                    );
                    k
                }
                None => {
                    rec.params.push((name.to_string(), value));
                    rec.params.len() - 1
                }
            };
            rec.nodes.push(Node::Param(k));
            Sym((rec.nodes.len() - 1) as u32)
        })
    }
}

macro_rules! sym_op {
    ($tr:ident, $f:ident, $node:ident) => {
        impl $tr for Sym {
            type Output = Sym;
            fn $f(self, o: Sym) -> Sym {
                push(Node::$node(self.0, o.0))
            }
        }
    };
}
sym_op!(Add, add, Add);
sym_op!(Sub, sub, Sub);
sym_op!(Mul, mul, Mul);
sym_op!(Div, div, Div);

impl Neg for Sym {
    type Output = Sym;
    fn neg(self) -> Sym {
        push(Node::Neg(self.0))
    }
}

impl Arith for Sym {
    /// Literals are kept exactly (as `f64`) and rounded by the kernel, as `Arith::c` rounds them.
    type Scalar = f64;
    fn splat(s: f64) -> Self {
        push(Node::Const(s))
    }
    fn c(x: f64) -> Self {
        push(Node::Const(x))
    }
    fn sqrt(self) -> Self {
        push(Node::Sqrt(self.0))
    }
}

/// A C literal that reads back as exactly `x` in double precision, cast to the kernel's `real`.
fn literal(x: f64) -> String {
    if x.is_finite() {
        format!("((real){x:e})")
    } else {
        panic!("non-finite constant {x} in a symbolic rule")
    }
}

impl Recording {
    /// The named run constants, in first-use order, with their values.
    pub fn params(&self) -> &[(String, f64)] {
        &self.params
    }

    /// Arithmetic operations reachable from `outputs` (what the generated code computes per node).
    pub fn operations(&self, outputs: &[Sym]) -> usize {
        let live = self.live(outputs);
        self.nodes
            .iter()
            .zip(&live)
            .filter(|(n, &l)| l && !matches!(n, Node::Input(_) | Node::Const(_) | Node::Param(_)))
            .count()
    }

    fn live(&self, outputs: &[Sym]) -> Vec<bool> {
        let mut live = vec![false; self.nodes.len()];
        for s in outputs {
            live[s.0 as usize] = true;
        }
        for k in (0..self.nodes.len()).rev() {
            if !live[k] {
                continue;
            }
            match self.nodes[k] {
                Node::Add(a, b) | Node::Sub(a, b) | Node::Mul(a, b) | Node::Div(a, b) => {
                    live[a as usize] = true;
                    live[b as usize] = true;
                }
                Node::Neg(a) | Node::Sqrt(a) => live[a as usize] = true,
                _ => {}
            }
        }
        live
    }

    /// C statements computing `outputs` and assigning each to its lvalue, one `const real` per
    /// operation in recorded order (so the compiler sees the CPU code's evaluation order), with
    /// `prefix` before every run-constant name. Every read of an input comes before every
    /// assignment, so an lvalue may also be an input (`g[3] = …` after reading `g[3]`).
    pub fn emit_c(&self, outputs: &[(String, Sym)], param_prefix: &str, indent: &str) -> String {
        let syms: Vec<Sym> = outputs.iter().map(|(_, s)| *s).collect();
        let live = self.live(&syms);
        let mut name: Vec<String> = vec![String::new(); self.nodes.len()];
        let mut out = String::new();
        for (k, node) in self.nodes.iter().enumerate() {
            if !live[k] {
                continue;
            }
            let arg = |a: &u32| name[*a as usize].clone();
            let expr = match node {
                Node::Input(s) => {
                    name[k] = s.clone();
                    continue;
                }
                Node::Const(x) => {
                    name[k] = literal(*x);
                    continue;
                }
                Node::Param(p) => {
                    name[k] = format!("{param_prefix}{}", self.params[*p].0);
                    continue;
                }
                Node::Add(a, b) => format!("{} + {}", arg(a), arg(b)),
                Node::Sub(a, b) => format!("{} - {}", arg(a), arg(b)),
                Node::Mul(a, b) => format!("{} * {}", arg(a), arg(b)),
                Node::Div(a, b) => format!("{} / {}", arg(a), arg(b)),
                Node::Neg(a) => format!("-{}", arg(a)),
                Node::Sqrt(a) => format!("thelma_sqrt({})", arg(a)),
            };
            let _ = writeln!(out, "{indent}const real v{k} = {expr};");
            name[k] = format!("v{k}");
        }
        // An output that is itself an input is copied first, so that no assignment below can
        // overwrite it before it is read.
        let mut finals = Vec::new();
        for (lhs, s) in outputs {
            let k = s.0 as usize;
            if matches!(self.nodes[k], Node::Input(_)) {
                if &name[k] == lhs {
                    continue;
                }
                let _ = writeln!(out, "{indent}const real c{k} = {};", name[k]);
                finals.push((lhs, format!("c{k}")));
            } else {
                finals.push((lhs, name[k].clone()));
            }
        }
        for (lhs, v) in finals {
            let _ = writeln!(out, "{indent}{lhs} = {v};");
        }
        out
    }

    /// Evaluates the recording in precision `T`, rounding every constant and run constant as the
    /// kernel does (`(real)x`) and every operation once: what the printed C computes without
    /// contraction. `input` gives the value of each named input.
    pub fn eval<T: Real>(&self, outputs: &[Sym], input: impl Fn(&str) -> T) -> Vec<T> {
        let mut v: Vec<T> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let x = |a: &u32| v[*a as usize];
            let r = match node {
                Node::Input(s) => input(s),
                Node::Const(c) => T::of(*c),
                Node::Param(p) => T::of(self.params[*p].1),
                Node::Add(a, b) => x(a) + x(b),
                Node::Sub(a, b) => x(a) - x(b),
                Node::Mul(a, b) => x(a) * x(b),
                Node::Div(a, b) => x(a) / x(b),
                Node::Neg(a) => -x(a),
                Node::Sqrt(a) => x(a).sqrt(),
            };
            v.push(r);
        }
        outputs.iter().map(|s| v[s.0 as usize]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_prints_and_evaluates_in_order() {
        let ((a, b), rec) = record(|| {
            let x = Sym::input("g[0]");
            let y = Sym::input("g[1]");
            let w = Sym::param("omega", 1.25);
            let a = (x + y) * w - Sym::c(0.5);
            let b = x;
            (a, b)
        });
        let c = rec.emit_c(&[("g[1]".into(), a), ("g[0]".into(), b)], "K_", "  ");
        assert!(c.contains("const real v3 = g[0] + g[1];"), "{c}");
        assert!(c.contains("const real v4 = v3 * K_omega;"), "{c}");
        assert!(c.contains("v4 - ((real)5e-1)"), "{c}");
        assert!(c.trim_end().ends_with("g[1] = v6;"), "{c}");
        // g[0] is its own output: no assignment.
        assert!(!c.contains("g[0] = "), "{c}");
        assert_eq!(rec.operations(&[a, b]), 3);
        let got = rec.eval::<f32>(&[a], |s| if s == "g[0]" { 0.1 } else { 0.2 });
        assert_eq!(got[0], (0.1f32 + 0.2f32) * 1.25f32 - 0.5f32);
    }

    #[test]
    fn an_input_moved_to_another_output_is_copied_before_assignments() {
        let ((x, y), rec) = record(|| (Sym::input("g[1]"), Sym::input("g[2]")));
        // A swap: g[2] = g[1], g[1] = g[2].
        let c = rec.emit_c(&[("g[2]".into(), x), ("g[1]".into(), y)], "", "");
        let first_assign = c.find("g[2] =").unwrap();
        assert!(
            c.find("const real c0 = g[1];").unwrap() < first_assign,
            "{c}"
        );
        assert!(
            c.find("const real c1 = g[2];").unwrap() < first_assign,
            "{c}"
        );
    }

    #[test]
    fn a_panic_inside_a_recording_leaves_the_thread_able_to_record() {
        let r = std::panic::catch_unwind(|| record(|| panic!("inside")));
        assert!(r.is_err());
        let (_, rec) = record(|| Sym::c(1.0));
        assert_eq!(rec.nodes.len(), 1);
    }
}
