#!/usr/bin/env python3
"""List the public API of the workjournal library, one item a line.

Reads the rustdoc JSON of the crate (built with every feature by
`scripts/public-api.sh`) and walks it from the crate root the way a user
reaches items: public modules, re-exports, and the items, variants,
fields, methods and trait impls under them. Items hidden from the docs
(`#[doc(hidden)]`) are not in the JSON, so they are not listed.

Usage: public-api.py TARGET/doc/workjournal.json > docs/public-api.txt
"""

import json
import sys


def main(path):
    doc = json.load(open(path))
    index = doc["index"]
    lines = set()

    def item(i):
        return index.get(str(i))

    def kind(it):
        return next(iter(it["inner"]))

    def fn_sig(prefix, it):
        f = it["inner"]["function"]
        params = [name for name, _ in f["sig"]["inputs"]]
        word = "async fn" if f.get("header", {}).get("is_async") else "fn"
        path = f"{prefix}::{it['name']}" if prefix else it["name"]
        return f"{word} {path}({', '.join(params)})"

    def impls_of(prefix, impl_ids):
        for i in impl_ids:
            imp = item(i)
            if imp is None:
                continue
            body = imp["inner"]["impl"]
            if body.get("is_synthetic") or body.get("blanket_impl") is not None:
                continue
            trait = body.get("trait")
            if trait is not None:
                lines.add(f"impl {trait['path']} for {prefix}")
                continue
            for m in body["items"]:
                mit = item(m)
                if mit is None or mit.get("visibility") != "public":
                    continue
                k = kind(mit)
                if k == "function":
                    lines.add(fn_sig(prefix, mit))
                else:
                    lines.add(f"{k} {prefix}::{mit['name']}")

    def walk(i, prefix, name=None, seen=()):
        it = item(i)
        if it is None or i in seen:
            return
        seen = seen + (i,)
        k = kind(it)
        name = name or it.get("name")
        path = f"{prefix}::{name}" if prefix else name
        inner = it["inner"][k]
        if k == "module":
            lines.add(f"mod {path}")
            for c in inner["items"]:
                walk(c, path, None, seen)
        elif k == "use":
            if inner.get("is_glob"):
                target = item(inner["id"]) if inner.get("id") is not None else None
                if target is not None and kind(target) == "module":
                    for c in target["inner"]["module"]["items"]:
                        walk(c, prefix, None, seen)
                return
            if inner.get("id") is not None and item(inner["id"]) is not None:
                walk(inner["id"], prefix, inner["name"], seen)
            else:
                lines.add(f"use {prefix}::{inner['name']} = {inner['source']}")
        elif k == "struct":
            lines.add(f"struct {path}")
            shape = inner["kind"]
            fields = shape.get("plain", {}).get("fields", []) if isinstance(shape, dict) else []
            for f in fields:
                fit = item(f)
                if fit is not None:
                    lines.add(f"field {path}::{fit['name']}")
            impls_of(path, inner["impls"])
        elif k == "enum":
            lines.add(f"enum {path}")
            for v in inner["variants"]:
                vit = item(v)
                if vit is not None:
                    lines.add(f"variant {path}::{vit['name']}")
            impls_of(path, inner["impls"])
        elif k == "trait":
            lines.add(f"trait {path}")
            for m in inner["items"]:
                mit = item(m)
                if mit is None:
                    continue
                if kind(mit) == "function":
                    lines.add(fn_sig(path, mit))
                else:
                    lines.add(f"{kind(mit)} {path}::{mit['name']}")
        elif k == "function":
            lines.add(fn_sig(prefix, it))
        elif k in ("macro", "proc_macro"):
            lines.add(f"macro {name}!")
        else:
            lines.add(f"{k} {path}")

    walk(doc["root"], "")
    for line in sorted(lines):
        print(line)


if __name__ == "__main__":
    main(sys.argv[1])
