"""Tests of hack/lib/symbol_layout.py's decisions and hack/lib/linkmap.py's map reader.
Run: python3 -m unittest discover -s hack/lib -p 'test_*.py' (hack/test.sh does)."""
import os, sys, tempfile, unittest
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linkmap
from symbol_layout import FOLIO, MARGIN, Section, hot_sections, ordering, plan, tiers

KIB = 1 << 10


def sec(name, size, dem=None, align=16):
    return Section(size, align, [name], dem or name)


class HotSections(unittest.TestCase):
    def test_first_run_order_over_traces_and_shared_names(self):
        s = [sec("a", 10), sec("b", 10), Section(10, 1, ["read_int"], "read_int"),
             Section(10, 1, ["read_int", "c"], "read_int c"), sec("d", 10)]
        # trace 1 runs b then read_int; trace 2 adds d and repeats b; a never ran
        self.assertEqual(hot_sections(s, [["b", "read_int"], ["d", "b", "nowhere"]]), [1, 2, 3, 4])

    def test_nothing_ran(self):
        self.assertEqual(hot_sections([sec("a", 1)], [[]]), [])


class Tiers(unittest.TestCase):
    def test_each_tier(self):
        h = "17h0123456789abcdefE"
        s = [
            sec("_ZN5tokio4spawn" + h, 10, "tokio::task::spawn"),                      # ran
            sec("_ZN8deckhand4pleg5relist" + h, 10, "deckhand::pleg::relist"),         # ran
            sec("_ZN5tokio4spawn17hfedcba9876543210E", 10, "tokio::task::spawn"),      # 0: sibling
            sec("_ZN4core3ptr13drop_in_place" + h, 10, "core::ptr::drop_in_place<x::Y>"),  # 1
            sec("_ZN8deckhand4pleg3gc" + h, 10, "deckhand::pleg::gc"),                # 2
            sec("_ZN4ring3aes" + h, 10, "<ring::aes::Key as deckhand::pleg::X>::f"),  # 3
            sec("_ZN5regex5parse" + h, 10, "regex::parse::p"),                        # 4
            sec("memcpy", 10, "memcpy"),                                              # 4: no module
        ]
        self.assertEqual(tiers(s, [0, 1]), {2: 0, 3: 1, 4: 2, 5: 3, 6: 4, 7: 4})


class Plan(unittest.TestCase):
    def layout(self, text_off, hot_sizes, cold):
        """cold: (size, tier) of each section that did not run"""
        s = [sec(f"h{i}", n) for i, n in enumerate(hot_sizes)]
        s += [sec(f"c{i}", n) for i, (n, _) in enumerate(cold)]
        hot = list(range(len(hot_sizes)))
        tier = {len(hot_sizes) + i: t for i, (_, t) in enumerate(cold)}
        return s, hot, tier, plan(s, hot, tier, text_off)

    def test_hot_code_starts_at_the_first_boundary_and_warm_fills_its_last_folio(self):
        text_off = FOLIO + 300 * KIB  # 1.7 MiB of text below the first boundary at 4 MiB
        cold = [(64 * KIB, 4)] * 40 + [(64 * KIB, 3)] * 30 + [(16 * KIB, 0)] * 20 + [(32 * KIB, 1)] * 10
        s, hot, tier, p = self.layout(text_off, [100 * KIB] * 25, cold)
        first = 2 * FOLIO
        self.assertTrue(first <= p.hot_start <= first + MARGIN, hex(p.hot_start))
        self.assertEqual(p.hot, hot)
        self.assertEqual(p.hot_end, p.hot_start + 25 * 100 * KIB)
        # below the boundary the least likely code first (smaller, likelier code fills what is
        # left up to the margin), the most likely above the hot code, up to the next margin
        pre_tiers = [tier[a] for a in p.pre]
        self.assertEqual(pre_tiers[:27], [4] * 27)  # 27 x 64 KiB fit in 1.7 MiB + 32 KiB
        self.assertEqual(pre_tiers, sorted(pre_tiers, reverse=True))
        last = -(-p.hot_end // FOLIO) * FOLIO  # the boundary after the hot code (8 MiB)
        self.assertEqual(last, 4 * FOLIO)
        self.assertLessEqual(p.warm_end, last - MARGIN)
        self.assertGreater(p.warm_end, last - MARGIN - 64 * KIB)
        warm_tiers = [tier[a] for a in p.post]
        self.assertEqual(warm_tiers, sorted(warm_tiers))
        likely = {a for a in tier if tier[a] <= 1}  # all of tiers 0 and 1 fit, above or below
        self.assertLessEqual(likely, set(p.pre) | set(p.post))
        self.assertEqual(warm_tiers[:len(likely - set(p.pre))], sorted(tier[a] for a in likely - set(p.pre)))
        # every section once; the cold ones after, least likely first
        self.assertEqual(sorted(p.pre + p.hot + p.post + p.cold), list(range(len(s))))
        cold_tiers = [tier[a] for a in p.cold]
        self.assertEqual(cold_tiers, sorted(cold_tiers, reverse=True))

    def test_alignment_is_counted(self):
        s = [Section(4 * KIB, 1, ["pad"], "pad"), Section(1, 1, ["h"], "h"),
             Section(40 * KIB, 4096, ["a"], "a")]  # larger than the margin: not below
        p = plan(s, [1], {0: 4, 2: 4}, FOLIO - 4 * KIB)
        self.assertEqual(p.pre, [0])
        self.assertEqual((p.hot_start, p.hot_end), (FOLIO, FOLIO + 1))
        self.assertEqual(p.post, [2])
        self.assertEqual(p.warm_end, FOLIO + 4096 + 40 * KIB)

    def test_too_little_code_below_the_boundary(self):
        with self.assertRaises(ValueError):
            self.layout(FOLIO - 100 * KIB, [10], [(10 * KIB, 4)])

    def test_ordering_names_each_symbol_once(self):
        s = [Section(10, 1, ["x", "y"], ""), Section(10, 1, ["y", "z"], "")]
        p = plan(s, [1, 0], {}, FOLIO)
        self.assertEqual(ordering(s, p), ["y", "z", "x"])


MAP = """\
             VMA              LMA     Size Align Out     In      Symbol
          201000           201000   19cad4  4096 .rodata
          201000           201000      240     8         a.o:(.rodata.x)
          4efe80           4efe80      400    64 .text
          4efe80           4efe80      200    64         libring.rlib(chacha.o):(.text.chacha)
          4efe80           4efe80      1f9     1                 poly_hash_ad_internal
          4f0080           4f0080        0     1                 process_extra_in_trailer
          4f0080           4f0080      100    16         deckhand.o:(.text._ZN8deckhand4mainE)
          4f0080           4f0080      100     1                 _ZN8deckhand4mainE
          4f0180           4f0180      100    16         <internal>:(.text)
          c75a00           c75a00       10     8 .data
          c75a00           c75a00       10     8         a.o:(.data.y)
          c75a00           c75a00       10     1                 y
"""


class LinkMap(unittest.TestCase):
    def test_text_sections(self):
        with tempfile.NamedTemporaryFile("w", suffix=".map") as f:
            f.write(MAP)
            f.flush()
            units = linkmap.text_sections(f.name)
        self.assertEqual(units, [
            [0x4efe80, 0x200, 64, [(0x4efe80, 0x1f9, "poly_hash_ad_internal"),
                                   (0x4f0080, 0, "process_extra_in_trailer")]],
            [0x4f0080, 0x100, 16, [(0x4f0080, 0x100, "_ZN8deckhand4mainE")]],
            [0x4f0180, 0x100, 16, []],
        ])


if __name__ == "__main__":
    unittest.main()
