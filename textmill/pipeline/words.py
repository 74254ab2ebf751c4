"""English words and sentences as the quality filters count them.

The Gopher, C4 and FineWeb rules count words, punctuation marks among them, and datatrove, whose
implementation of those rules is the common reference, splits English text with spaCy's rule-based
tokenizer. This module splits text by the same kind of rules, without spaCy:
- text is cut at whitespace; URLs and e-mail addresses stay whole;
- punctuation, quotes, brackets and currency signs come off the front of each piece, one at a time;
  punctuation, quotes, brackets, `'s`, units after a number (`5km`, `10%`) and a full stop after a
  lower-case letter, a digit or two capitals come off its end;
- inside what is left, an ellipsis, a hyphen or slash before a letter, a comma between letters, a full
  stop between a lower-case and a capital letter, and an operator between digits are tokens of their own;
- common abbreviations (`Mr.`, `e.g.`, `Jan.`, single letters) keep their full stop, and clitics come
  off (`don't` is `do` `n't`, `it's` is `it` `'s`).
A sentence ends after a `.`, `!` or `?` token, once a token follows that is not punctuation (spaCy's
sentencizer). tests/integration/test_quality.py measures agreement with datatrove on real pages.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from itertools import chain

import regex

_CURRENCY = r"US\$|C\$|A\$|[$£€¥฿₹₽₩₪₫₴₦₱₺₿]"
_QUOTES = r"""'"”“`‘´’‚„»«"""
_EDGE = r"\.\.+|…|[,:;!?¿¡()\[\]{}<>_#*&。？！，、；：～·।،۔؛٪؟" + _QUOTES + r"\p{So}]"
_UNITS = ("km|km²|km³|m|m²|m³|dm|dm²|dm³|cm|cm²|cm³|mm|mm²|mm³|ha|µm|nm|yd|in|ft|kg|g|mg|µg|t|lb|oz|m/s|km/h|kmh|"
          "mph|hPa|Pa|mbar|mb|MB|kb|KB|gb|GB|tb|TB|T|G|M|K|%")
_PREFIX = regex.compile(rf"^(?:{_EDGE}|[§%=—–]|\+(?![0-9])|{_CURRENCY})")
_SUFFIX = regex.compile(
    rf"(?:{_EDGE}|'s|'S|’s|’S|—|–|(?<=[0-9])\+|(?<=°[FfCcKk])\.|(?<=[0-9])(?:{_CURRENCY}|{_UNITS})"
    rf"|(?<=[0-9\p{{Ll}}\p{{Lo}}%²\-+…{_QUOTES})\]])\.|(?<=\p{{Lu}}\p{{Lu}})\.)$")
_INFIX = regex.compile(
    r"\.\.+|…|\p{So}|(?<=[0-9])[+\-*^](?=[0-9-])|(?<=[\p{Ll}" + _QUOTES + r"])\.(?=[\p{Lu}" + _QUOTES + r"])"
    r"|(?<=\p{L}),(?=\p{L})|(?<=[\p{L}0-9])(?:---|--|-|–|—|~)(?=\p{L})|(?<=[\p{L}0-9])[:<>=/](?=\p{L})")
_URL = regex.compile(r"^(?:[A-Za-z][\w+.-]*://)?(?:\S+@)?(?:[\w\u00a1-\uffff-]+\.)+[a-z\u00a1-\uffff]{2,63}(?::\d+)?"
                     r"(?:[/?#]\S*)?$")
_CLITIC = regex.compile(r"^(\p{L}+?)(n['’]t|['’](?:s|m|re|ve|d|ll))$", regex.IGNORECASE)
# Pieces kept whole or split by a rule of their own, as English tokenizers have them (these are spaCy's
# English exceptions): abbreviations that keep their full stop, emoticons, and clitics written without
# an apostrophe ("dont" is "do" "nt"; "|" marks the cuts).
ABBREVIATIONS = frozenset(
    "Adm. Ak. Ala. Apr. Ariz. Ark. Aug. Bros. Calif. Co. Colo. Conn. Corp. D.C. Dec. Del. Dr. E.G. E.g. Feb. Fla. Ga. "
    "Gen. Gov. I.E. I.e. Ia. Id. Ill. Inc. Ind. Jan. Jr. Jul. Jun. Kan. Kans. Ky. La. Ltd. Mar. Mass. Md. Messrs. Mich. "
    "Minn. Miss. Mo. Mont. Mr. Mrs. Ms. Mt. N.C. N.D. N.H. N.J. N.M. N.Y. Neb. Nebr. Nev. Nov. Oct. Okla. Ore. Pa. "
    "Ph.D. Prof. Rep. Rev. S.C. Sen. Sep. Sept. St. Tenn. Va. Wash. Wis. a.m. co. e.g. i.e. p.m. v.s. vs. ä. ö. ü. "
    ":) :( :-) :-( ;) ;-) :D :P :p :/ :o :O :| :] :} :3 :* :-D :-P :-p :-/ :-o :-O ): (: (; (= =) =( <3 8) 8-) ^_^ -_- "
    "o_O O_o o_o O_O and/or w/o C++ 'cause 'bout 'em 'nuff 'cos 'coz 'cuz 'Cause 'Cos 'Coz 'Cuz".split()
    + [c + "." for c in "abcdefghijklmnopqrstuvwxyz"])
_CONTRACTIONS = (
    "ai|nt are|nt can|not ca|nt ca|nt|ve could|nt could|nt|ve could|ve dare|nt did|nt did|nt|ve does|nt does|nt|ve "
    "do|nt do|nt|ve gon|na got|ta had|nt had|nt|ve has|nt have|nt he|d he|d|ve he|ll|ve he|s how|d how|d|ve how|ll "
    "how|ll|ve how|re how|s how|ve i|d i|d|ve i|ll|ve i|m i|m|a is|nt it|d it|d|ve it|ll it|ll|ve i|ve may|nt "
    "may|nt|ve might|nt might|nt|ve might|ve must|nt must|nt|ve must|ve need|nt need|nt|ve not|ve ought|nt ought|nt|ve "
    "sha|nt sha|nt|ve she|d|ve she|ll|ve she|s should|nt should|nt|ve should|ve that|d that|d|ve that|ll that|ll|ve "
    "that|s there|d there|d|ve there|ll there|ll|ve there|re there|s there|ve these|d these|d|ve these|ll these|ll|ve "
    "these|re these|ve they|d they|d|ve they|ll they|ll|ve they|re they|ve this|d this|d|ve this|ll this|ll|ve this|s "
    "those|d those|d|ve those|ll those|ll|ve those|re those|ve was|nt we|d we|d|ve we|ll|ve were|nt we|ve what|d "
    "what|d|ve what|ll what|ll|ve what|re what|s what|ve when|d when|d|ve when|ll when|ll|ve when|re when|s when|ve "
    "where|d where|d|ve where|ll where|ll|ve where|re where|s where|ve who|d who|d|ve who|ll who|ll|ve who|s who|ve "
    "why|d why|d|ve why|ll why|ll|ve why|re why|s why|ve wo|nt wo|nt|ve would|nt would|nt|ve would|ve y|all you|d "
    "you|d|ve you|ll you|ll|ve you|re you|ve").split()
CONTRACTIONS = {form.replace("|", ""): tuple(form.split("|")) for form in _CONTRACTIONS}
CONTRACTIONS.update({whole.capitalize(): (parts[0].capitalize(), *parts[1:]) for whole, parts in list(CONTRACTIONS.items())})
SENTENCE_ENDS = frozenset(".!?‼‽⁇⁈⁉！．？｡。।॥؟۔։።፧፨")


def _special(piece: str) -> list[str] | None:
    """The tokens of a piece that is split by a rule of its own, or None."""
    if piece in ABBREVIATIONS:
        return [piece]
    if piece in CONTRACTIONS:
        return list(CONTRACTIONS[piece])
    clitic = _CLITIC.match(piece)
    if clitic:
        return [clitic.group(1), clitic.group(2)]
    return None


def _split_infixes(piece: str) -> list[str]:
    out, start = [], 0
    for m in _INFIX.finditer(piece):
        if m.start() == 0 or m.end() == len(piece):  # an infix is inside the piece, never at its edge
            continue
        if m.start() > start:
            out.append(piece[start : m.start()])
        out.append(m.group())
        start = m.end()
    out.append(piece[start:])
    return [p for p in out if p]


@lru_cache(maxsize=1 << 16)
def _split_piece(piece: str) -> tuple[str, ...]:
    """The tokens of one whitespace-free piece of text: affixes come off both ends, one of each at a time,
    until what is left is split by a rule of its own or has no affix left."""
    front, back = [], []
    middle = None
    while piece:
        middle = _special(piece)
        if middle:
            break
        prefix = _PREFIX.search(piece)
        pre = prefix.end() if prefix else 0
        suffix = _SUFFIX.search(piece[pre:])
        suf = len(suffix.group()) if suffix else 0
        if pre and _special(piece[pre:]):
            front.append(piece[:pre])
            piece = piece[pre:]
        elif suf and pre + suf < len(piece) and _special(piece[:-suf]):
            back.append(piece[-suf:])
            piece = piece[:-suf]
        elif pre and suf and pre + suf <= len(piece):
            front.append(piece[:pre])
            back.append(piece[-suf:])
            piece = piece[pre:-suf]
        elif pre:
            front.append(piece[:pre])
            piece = piece[pre:]
        elif suf:
            back.append(piece[-suf:])
            piece = piece[:-suf]
        else:
            break
    if not middle:
        middle = [piece] if _URL.match(piece) else _split_infixes(piece) if piece else []
    return _join_specials(front + middle + back[::-1])


def _join_specials(tokens: list[str]) -> tuple[str, ...]:
    """Neighbouring tokens that together spell an abbreviation or emoticon, joined: `word):` is `word` `):`."""
    out, i = [], 0
    while i < len(tokens):
        for j in range(min(len(tokens), i + 4), i + 1, -1):
            if "".join(tokens[i:j]) in ABBREVIATIONS:
                out.append("".join(tokens[i:j]))
                i = j
                break
        else:
            out.append(tokens[i])
            i += 1
    return tuple(out)


def split_words(text: str) -> list[str]:
    """The words of `text`, punctuation marks included, as English word tokenizers split it: each run of
    non-space (str.split, its loop in C) cut into tokens (a run seen before is a cache hit)."""
    return list(chain.from_iterable(map(_split_piece, text.split())))


def is_punctuation(token: str) -> bool:
    return all(unicodedata.category(c).startswith("P") for c in token)


@lru_cache(maxsize=1 << 16)
def _sentence_role(token: str) -> str:
    """"E" for a sentence-ending mark, "P" for other punctuation, "W" for a word."""
    return "E" if token in SENTENCE_ENDS else "P" if is_punctuation(token) else "W"


def count_sentences(text: str) -> int:
    """How many sentences `text` holds: a new one begins at a word after a sentence-ending mark (other
    punctuation between them does not matter), and text with any token holds one. Counted on the tokens'
    roles as one string, in C."""
    roles = "".join(map(_sentence_role, split_words(text)))
    return (1 + roles.replace("P", "").count("EW")) if roles else 0
