import json

import numpy as np
import torch

from sglite.runtime.constrained import jump_forward_tokens

SCHEMA = {"type": "object", "properties": {"order": {"type": "integer"}, "orderId": {"type": "string"}},
          "required": ["orderId"], "additionalProperties": False}


def test_grammar_cache_and_immutability(compiler):
    g1 = compiler.compile_json_schema(SCHEMA)
    g2 = compiler.compile_json_schema(json.dumps(SCHEMA))
    assert g1 is g2
    m1, m2 = g1.matcher(), g1.matcher()
    assert m1.accept_string(b'{"order')
    assert m2.find_jump_forward_string() == ""        # a fresh matcher is not affected
    assert compiler.compile_regex("a+") is compiler.compile_regex("a+")


def test_bitmask_matches_bool_mask(tokenizer, compiler):
    g = compiler.compile_json_schema(SCHEMA)
    m = g.matcher()
    m.accept_string(b'{"orderId": "x", ')
    words = (tokenizer.vocab_size + 31) // 32
    bm = torch.zeros((3, words), dtype=torch.int32)
    m.fill_next_token_bitmask(bm, 1)
    assert not bm[0].any() and not bm[2].any()
    bits = bm[1].numpy().view(np.uint32)
    unpacked = ((bits[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(bool).reshape(-1)[:tokenizer.vocab_size]
    assert (unpacked == m.allowed_token_ids().numpy()).all()
    assert m.allowed_token_ids().dtype == torch.bool and m.allowed_token_ids().shape == (tokenizer.vocab_size,)


def test_advance_rejects_and_keeps_state(tokenizer, compiler):
    g = compiler.compile_json_schema(SCHEMA)
    m = g.matcher()
    bad = tokenizer.encode("hello")[0]
    before = m.allowed_mask().copy()
    assert not m.accept_token(bad)
    assert (m.allowed_mask() == before).all()
    assert not m.accept_token(tokenizer.eos_token_id)


def test_copy_is_independent(compiler):
    g = compiler.compile_json_schema(SCHEMA)
    m = g.matcher()
    m.accept_string(b"{")
    c = m.copy()
    assert c.accept_string(b'"orderId": "a"}')
    assert c.is_accepting() and not m.is_accepting()


def test_terminated_after_root_closes(tokenizer, compiler):
    g = compiler.compile_json_schema(SCHEMA)
    m = g.matcher()
    assert m.accept_string(b'{"orderId": "a"}')
    assert m.is_accepting() and m.is_terminated()
    assert m.accept_token(tokenizer.eos_token_id)
    assert m.is_terminated()


def test_forced_text(compiler):
    g = compiler.compile_json_schema(SCHEMA, whitespace="compact")
    m = g.matcher()
    assert m.find_jump_forward_string() == '{"order'     # both names start with "order"
    m.accept_string(b'{"orderI')
    assert m.find_jump_forward_string() == 'd":"'


def _ids_cover(tokenizer, ids, text):
    return b"".join(tokenizer.token_bytes(i) for i in ids) == text.encode()


def test_jump_forward_backs_off_at_possible_merges(tokenizer, compiler):
    # regression (SGLang's jump-forward drift): forced `{"order` must not be committed as `{"` + `order` when
    # the model would write `orderId` as one token
    g = compiler.compile_json_schema(SCHEMA, whitespace="compact")
    m = g.matcher()
    ids = jump_forward_tokens(tokenizer, m)
    forced = m.find_jump_forward_string()
    text = tokenizer.decode(ids)
    assert forced.startswith(text)
    # whatever we commit must be a prefix of how the tokenizer splits every plausible completion
    for completion in ['{"orderId":"x"}', '{"order":1,"orderId":"x"}']:
        full = tokenizer.encode(completion)
        assert full[:len(ids)] == ids, (ids, full)
    for i in ids:
        assert m.accept_token(i)


def test_jump_forward_after_value(tokenizer, compiler):
    g = compiler.compile_json_schema({"type": "object", "properties": {"revenue": {"type": "number"},
                                      "year": {"type": "integer"}}, "required": ["revenue", "year"],
                                      "additionalProperties": False}, whitespace="compact")
    m = g.matcher()
    forced = m.find_jump_forward_string()
    assert forced == '{"'
    ids = jump_forward_tokens(tokenizer, m)
    for completion in ['{"revenue":1,"year":2}', '{"year":2,"revenue":1}']:
        assert tokenizer.encode(completion)[:len(ids)] == ids


def test_jump_forward_commits_safe_prefix(tokenizer, compiler):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    g = compiler.compile_json_schema(schema, whitespace="compact")
    m = g.matcher()
    ids = jump_forward_tokens(tokenizer, m)     # forced '{"': '"' starts many tokens, so little is safe
    assert m.find_jump_forward_string().startswith(tokenizer.decode(ids))
    for completion in ['{"name":"Bob","age":3}', '{"age":3,"name":"x"}', '{"name":"","age":10}']:
        assert tokenizer.encode(completion)[:len(ids)] == ids
    # after the first value, the separator and the next name are forced
    m.accept_string(b'{"name":"Bob"')
    ids = jump_forward_tokens(tokenizer, m)
    assert ids, "the separator and the only remaining name are forced"
    assert ',"age":'.startswith(tokenizer.decode(ids))
    for rest in [',"age":3}', ',"age":-1}', ',"age":1234}']:     # forced text + what the model may write
        assert tokenizer.encode(rest)[:len(ids)] == ids


def _brute_mask(g, stack) -> np.ndarray:
    """Reference: a text token is allowed from `stack` iff the parser accepts its bytes (byte-by-byte run)."""
    idx = g.index
    out = np.zeros(idx.vocab_size, bool)
    for t in idx.text_tokens:
        out[t] = bool(g.run((stack,), idx.token_bytes[t]))
    return out


def test_stack_masks_equal_byte_by_byte_reference(tokenizer, compiler):
    """The fast masks (structural trie walk handing lexemes to per-(DFA state, trie node) classifications,
    object names filtered by reachable labels, string length bounds) equal a byte-by-byte run of every token."""
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 5},
        "tags": {"type": "array", "items": {"enum": ["red", "green"]}},
        "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
        "required": ["name"], "additionalProperties": {"type": "boolean"}}
    g = compiler.compile_json_schema(schema)
    text = '{"name": "ab", "tags": ["red"], "n": 12, "x": true}'
    m = g.matcher()
    checked = 0
    for i, t in enumerate(tokenizer.encode(text)):
        if i % 2 == 0:
            for st in m._stacks:
                assert (g.masks.stack_mask_bool(st) == _brute_mask(g, st)).all(), (i, st)
                checked += 1
        assert m.accept_token(t)
    assert checked >= 8


def test_key_masks_equal_reference_when_other_names_toggle(tokenizer, compiler):
    """Object names built on the plain-string classification (shared packed mask, first bytes patched):
    equal to the byte-by-byte reference inside a name, at its start, with other names allowed and, after
    two names without the required "name", not allowed any more (only its prefixes left)."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "nick": {"type": "integer"},
                                                "n\u00e9": {"type": "null"}},
              "required": ["name"], "maxProperties": 3, "additionalProperties": {"type": "integer"}}
    g = compiler.compile_json_schema(schema)
    for text in ['{"nab": 1, "ni": 2, "name": "a"}', '{"nick": 1, "zz": 2, "name": "a"}']:
        m = g.matcher()
        for t in tokenizer.encode(text):
            for st in m._stacks:
                assert (g.masks.stack_mask_bool(st) == _brute_mask(g, st)).all(), (text, st)
            assert m.accept_token(t)


def test_classify_walks_agree(compiler):
    """The compiled scan (trie_walk.py) and Python's depth-first walk give the same tokens, end states, characters
    started and leaving groups: from the trie root (key DFA: dense; integer and date: sparse first bytes,
    lexemes that may end; a pattern; the plain string), with first bytes restricted, and below a structural
    prefix."""
    from sglite.runtime.constrained.automata.key_dfa import words_dfa
    from sglite.kernels import trie_walk_cpu as trie_walk
    assert trie_walk.available()
    idx = compiler.index
    dfas = [words_dfa({"name": "name", "nick": "nick"}, ("other",)),
            compiler.compile_json_schema({"type": "integer"}).nodes[0].dfa,
            compiler.compile_json_schema({"type": "string", "format": "date"}).nodes[0].dfa,
            compiler.compile_json_schema({"type": "string", "pattern": "^[a-z ]+,?$"}).nodes[0].dfa,
            compiler.compile_json_schema({"type": "string"}).nodes[0].dfa]

    def same(a, b):
        assert dict(zip(a.inside.tolist(), zip(a.end.tolist(), a.inc.tolist()))) == \
            dict(zip(b.inside.tolist(), zip(b.end.tolist(), b.inc.tolist())))
        assert len(a.inside) == len(b.inside)
        assert {(x, rest, frozenset(toks)) for x, rest, toks in a.leaving} == \
            {(x, rest, frozenset(toks)) for x, rest, toks in b.leaving}
        assert sorted(a.leave_ids.tolist()) == sorted(b.leave_ids.tolist())

    def scan(dfa, s, node, first):
        kids = idx.children[node]
        first = [b for b in first if b in kids]
        bound = sum(idx.tok_hi[kids[b]] - idx.tok_lo[kids[b]] for b in first)
        ids, inc, end, leaving, rows = trie_walk.compiled_walk(idx.scan, idx.by_pre, dfa, s, node, first, bound)
        return idx._classes(dfa, s, node, ids, inc, end, leaving, rows)

    checked = dense = 0
    for dfa in dfas:
        for s in range(dfa.num_states):
            first = dfa.live_bytes(s)
            if not first:
                continue
            ref = idx._walk_dfs(dfa, s, 0, None)
            same(scan(dfa, s, 0, first), ref)
            same(idx._walk(dfa, s, 0, None), ref)      # whichever walk it picks
            some = [b for b in first if b % 3 == 0]
            same(scan(dfa, s, 0, some), idx._walk_dfs(dfa, s, 0, some))
            checked += 1
            dense += len(ref.inside) > 10_000
    node = idx.children[0][0x22]         # below a structural prefix: the subtree of the trie node for '"'
    for dfa in dfas[1:]:
        for s in range(dfa.num_states):
            same(scan(dfa, s, node, range(256)), idx._walk_dfs(dfa, s, node, None))
            checked += 1
    assert checked >= 40 and dense >= 2


def test_leave_points_agree(compiler):
    """TokenIndex.leave_points from the compiled scan's rows (every accepting node on a path, with the dead
    subtrees below it) groups exactly the tokens that Python's walk's `leaving` groups say may leave, each at the
    trie node where its lexeme would end: every state of the lexemes of four corpus grammars (a space then a
    word: thousands of tokens), from the trie root and from below a space."""
    from pathlib import Path

    from sglite.runtime.constrained.cfg import lark_to_ir, lower_rules
    idx = compiler.index
    data = Path(__file__).resolve().parents[1] / "data" / "grammars"
    checked = big = 0
    for name in ("json", "sql", "arith", "config"):
        text = (data / f"{name}.lark").read_text()
        for dfa in {n.dfa for n in lower_rules(lark_to_ir(text)).nodes if hasattr(n, "dfa")}:
            for s in range(dfa.num_states):
                for node in (0, idx.children[0][0x20]):
                    got = {m: sorted(t.tolist()) for m, t in idx.leave_points(dfa, s, node)}
                    want = {m: sorted(t.tolist()) for m, t in idx._points_of(idx._walk_dfs(dfa, s, node, None))}
                    assert got == want, (name, s, node)
                    checked += 1
                    big += sum(map(len, got.values())) > 10_000
    assert checked >= 200 and big >= 1


def test_leave_rows_agree(compiler):
    """The compiled walk over leaving tokens' bytes (trie_walk.leave_rows) gives the rows Python's gives: every
    place each token may end the lexeme, its state and characters, for the tokens leaving plain strings,
    numbers, a pattern and a name DFA, from the root and from below '"'."""
    from sglite.runtime.constrained.automata.key_dfa import words_dfa
    from sglite.kernels import trie_walk_cpu as trie_walk
    idx = compiler.index
    dfas = [words_dfa({"name": "name", "nick": "nick"}, ("other",)),
            compiler.compile_json_schema({"type": "number"}).nodes[0].dfa,
            compiler.compile_json_schema({"type": "string", "pattern": "^[a-z ]+,?$"}).nodes[0].dfa,
            compiler.compile_json_schema({"type": "string"}).nodes[0].dfa]
    rows = 0
    for dfa in dfas:
        for s in range(dfa.num_states):
            for node in (0, idx.children[0][0x22]):
                ids = idx.classify(dfa, s, node).leave_ids.tolist()
                depth = idx.depth[node]
                got = trie_walk.leave_rows(idx.tok_off, idx.tok_data, dfa, s, depth, ids)
                want = idx._leave_rows(dfa, s, depth, ids)
                assert sorted(zip(*got)) == sorted(zip(*want)), (s, node)
                rows += len(want[0])
    assert rows > 1000


def test_name_walk_agrees(compiler):
    """TokenIndex.split classifies the first bytes where a name DFA's state differs from the plain string exactly
    as Python's walk does, and classify's merge of the plain string's classes with those is the whole walk:
    every state of name DFAs with shared prefixes, non-ASCII names, escapes, canonical or not."""
    from sglite.runtime.constrained.automata.key_dfa import words_dfa
    idx = compiler.index

    def key(tc):
        return (sorted(zip(tc.inside.tolist(), tc.end.tolist(), tc.inc.tolist())),
                sorted((a, rest, tuple(sorted(toks))) for a, rest, toks in tc.leaving))

    def uncounted(tc):
        return (sorted(zip(tc.inside.tolist(), tc.end.tolist())),
                sorted((a, rest, tuple(sorted(t for t, _ in toks))) for a, rest, toks in tc.leaving))

    checked = 0
    for names in (["name", "nick", "nickname", "a"], ["caf\u00e9", "\u65e5\u672c", "a\"b", "x\\y"], ["id"]):
        for canonical in (False, True):
            dfa = words_dfa({n: n for n in names}, ("other",), canonical=canonical)
            assert dfa.alias is not None
            for s in range(dfa.alias.num_states, dfa.num_states):
                differ = np.nonzero(dfa.table[s] != dfa.table[dfa.alias_ref])[0].tolist()
                if differ:
                    assert key(idx.split(dfa, s)[2]) == key(idx._walk_dfs(dfa, s, 0, differ)), (names, s)
                    if checked % 8 == 0:     # (characters started are not counted in names)
                        assert uncounted(idx.classify(dfa, s)) == uncounted(idx._walk_dfs(dfa, s, 0, None)), \
                            (names, s)
                    checked += 1
    assert checked >= 100


def test_undeclared_name_ends_in_the_plain_strings_end_state(tokenizer, compiler):
    """words_dfa sends the closing quote of a name that is no declared one to the plain string's own end state
    (labelled `other`), so a name state differs from the plain string only on its next characters and the
    escape, and TokenIndex.split does not redo the '"' subtree for every state; masks stay exact along names
    that share a prefix with declared ones, declared or not."""
    from sglite.runtime.constrained.automata.key_dfa import words_dfa
    names = {"custom_field_id": "custom_field_id", "custom_field_answer": "custom_field_answer", "href": "href"}
    dfa = words_dfa(names, ("other",))
    plain_end = int(dfa.table[dfa.alias_ref, 0x22])
    assert dfa.labels[plain_end] == ("other",)
    idx = compiler.index
    own_ends = 0
    for s in range(dfa.alias.num_states, dfa.num_states):
        end = int(dfa.table[s, 0x22])
        if end < 0 or not dfa.accepting[end]:       # (after a backslash '"' is a character)
            continue
        if dfa.labels.get(end) == ("other",):
            assert end == plain_end
        else:
            assert dfa.labels[end] in names.values()
            own_ends += 1
    assert own_ends == len(names)

    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names},
              "additionalProperties": {"type": "integer"}}
    g = compiler.compile_json_schema(schema)
    m = g.matcher()
    for t in tokenizer.encode('{"custom_x": 1, "custom_field_id": 2, "custom_field_answe": 3, "hre": 4}'):
        for st in m._stacks:
            assert (g.masks.stack_mask_bool(st) == _brute_mask(g, st)).all(), st
        assert m.accept_token(t)
