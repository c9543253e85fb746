"""A small multi-language repository for the code-graph tests: Python, TypeScript, Go,
Rust, Java, C and C++ files with imports, calls, inheritance and implementations, plus
what a repository walk must skip (vendored, ignored, binary and empty files)."""

from __future__ import annotations

from pathlib import Path

FILES: dict[str, str] = {
    "geo/geo.go": (
        "package geo\n"
        "\n"
        'import "math"\n'
        "\n"
        "type Point struct {\n"
        "\tX, Y float64\n"
        "}\n"
        "\n"
        "type Measurer interface {\n"
        "\tDistance(p Point) float64\n"
        "}\n"
        "\n"
        "func (p Point) Distance(q Point) float64 {\n"
        "\treturn math.Sqrt(sq(p.X-q.X) + sq(p.Y-q.Y))\n"
        "}\n"
        "\n"
        "func sq(v float64) float64 {\n"
        "\treturn v * v\n"
        "}\n"
    ),
    "geo/main.go": (
        "package geo\n"
        "\n"
        "func Origin() Point {\n"
        "\tp := Point{}\n"
        "\tp.Distance(Point{1, 2})\n"
        "\treturn p\n"
        "}\n"
    ),
    "native/shapes.cpp": (
        '#include "shapes.h"\n'
        "#include <cmath>\n"
        "\n"
        "namespace geo {\n"
        "static double half(double v) { return v / 2; }\n"
        "\n"
        "double Triangle::area() const {\n"
        "    return half(3.0 * 4.0);\n"
        "}\n"
        "}\n"
        "\n"
        "int main() {\n"
        "    geo::Triangle t;\n"
        "    return (int)t.area();\n"
        "}\n"
    ),
    "native/shapes.h": (
        "#pragma once\n"
        "namespace geo {\n"
        "class Polygon {\n"
        "public:\n"
        "    virtual double area() const = 0;\n"
        "};\n"
        "class Triangle : public Polygon {\n"
        "public:\n"
        "    double area() const override;\n"
        "};\n"
        "}\n"
    ),
    "native/util.c": (
        "#include <stdio.h>\n"
        "\n"
        "struct pair { int a; int b; };\n"
        "\n"
        "static int add(int a, int b) { return a + b; }\n"
        "\n"
        "int sum_pair(struct pair p) {\n"
        "    return add(p.a, p.b);\n"
        "}\n"
    ),
    "rustlib/src/lib.rs": (
        "mod shapes;\n"
        "use crate::shapes::{Area, Rect};\n"
        "\n"
        "pub enum Kind {\n"
        "    Small,\n"
        "    Large,\n"
        "}\n"
        "\n"
        "pub fn total(r: &Rect) -> f64 {\n"
        "    r.area()\n"
        "}\n"
    ),
    "rustlib/src/shapes.rs": (
        "pub trait Area {\n"
        "    fn area(&self) -> f64;\n"
        "}\n"
        "\n"
        "pub struct Rect {\n"
        "    pub w: f64,\n"
        "    pub h: f64,\n"
        "}\n"
        "\n"
        "impl Area for Rect {\n"
        "    fn area(&self) -> f64 {\n"
        "        mul(self.w, self.h)\n"
        "    }\n"
        "}\n"
        "\n"
        "fn mul(a: f64, b: f64) -> f64 {\n"
        "    a * b\n"
        "}\n"
    ),
    "shapes/base.py": (
        '"""Base shapes."""\n'
        "import math\n"
        "\n"
        "\n"
        "class Shape:\n"
        '    """Anything with an area."""\n'
        "\n"
        "    def area(self):\n"
        "        raise NotImplementedError\n"
        "\n"
        "    def describe(self):\n"
        '        return f"{type(self).__name__} of area {self.area()}"\n'
        "\n"
        "\n"
        "def square(x):\n"
        "    return x * x\n"
    ),
    "shapes/circle.py": (
        "from shapes.base import Shape, square\n"
        "from . import base\n"
        "\n"
        "\n"
        "class Circle(Shape):\n"
        "    def __init__(self, r):\n"
        "        self.r = r\n"
        "\n"
        "    def area(self):\n"
        "        return 3.14159 * square(self.r)\n"
        "\n"
        "\n"
        "def unit_circle():\n"
        "    c = Circle(1)\n"
        "    c.describe()\n"
        "    return base.square(2)\n"
    ),
    "src/main/java/com/demo/Animal.java": (
        "package com.demo;\n"
        "\n"
        "public abstract class Animal implements Comparable<Animal> {\n"
        "    public abstract String sound();\n"
        "\n"
        "    public int compareTo(Animal other) {\n"
        "        return sound().compareTo(other.sound());\n"
        "    }\n"
        "}\n"
    ),
    "src/main/java/com/demo/Dog.java": (
        "package com.demo;\n"
        "\n"
        "import java.util.List;\n"
        "\n"
        "public class Dog extends Animal {\n"
        "    @Override\n"
        "    public String sound() {\n"
        '        return "woof";\n'
        "    }\n"
        "\n"
        "    public static Dog make() {\n"
        "        Dog d = new Dog();\n"
        "        d.sound();\n"
        "        return d;\n"
        "    }\n"
        "}\n"
    ),
    "web/app.ts": (
        "import { greet, Named } from './util';\n"
        "\n"
        "export class User implements Named {\n"
        "  constructor(private n: string) {}\n"
        "  name(): string {\n"
        "    return this.n;\n"
        "  }\n"
        "}\n"
        "\n"
        "export class Admin extends User {\n"
        "  welcome(): string {\n"
        "    return greet(this);\n"
        "  }\n"
        "}\n"
        "\n"
        "export const shout = (s: string): string => s.toUpperCase();\n"
    ),
    "web/util.ts": (
        "export interface Named {\n"
        "  name(): string;\n"
        "}\n"
        "\n"
        "export function greet(who: Named): string {\n"
        '  return "hello " + who.name();\n'
        "}\n"
    ),
}

README = "# Demo\n\nIntro.\n\n## Build\n\n```sh\n# not a heading\nmake\n```\n\n## Use\n\nRun it.\n"


def write_repo(root: Path) -> Path:
    """The repository under ``root`` (a git checkout: it has a .git folder)."""
    for rel, text in {**FILES, "README.md": README}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / ".git").mkdir()
    (root / ".gitignore").write_text("generated/\n*.min.js\n")
    for rel, data in {
        "node_modules/left-pad/index.js": b"function leftPad() {}\n",
        "generated/gen.py": b"def generated(): pass\n",
        "web/app.min.js": b"function m(){}\n",
        "blob.py": b"x = 1\x00\x01\x02",
        ".hidden/secret.py": b"def secret(): pass\n",
        "shapes/__init__.py": b"",
    }.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root
