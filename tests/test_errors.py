"""pipeline/errors.py: one-line messages, control characters never printed raw, did-you-mean for names."""
from __future__ import annotations

import pytest

from models.encodings import get_spec
from pipeline.datasets import get
from pipeline.errors import DataError, ParamsError, UnknownNameError, printable, unknown
from pipeline.presets import resolve


def test_unknown_name_suggests_the_closest_and_lists_the_known():
    err = unknown("dataset", "sampel", ["sample", "diginetica", "ml_1m"])
    assert str(err) == "unknown dataset 'sampel'. Fix: did you mean 'sample'? (known: diginetica, ml_1m, sample)"
    far = unknown("dataset", "zzz", ["sample", "diginetica"])
    assert str(far) == "unknown dataset 'zzz'. Fix: use one of: diginetica, sample"
    assert isinstance(err, ParamsError)     # a wrong name is a wrong setting


@pytest.mark.parametrize("lookup, fragment", [
    (lambda: get("yoochose_1_64"), "unknown dataset 'yoochose_1_64'. Fix: did you mean 'yoochoose_1_64'?"),
    (lambda: get_spec("ldep"), "unknown encoding 'ldep'. Fix: did you mean 'ldpe'?"),
    (lambda: get_spec("LPE"), "unknown encoding 'LPE'. Fix: did you mean 'lpe'?"),     # case: below difflib's cutoff
    (lambda: get_spec("rpoe"), "unknown encoding 'rpoe'. Fix: did you mean 'rope'?"),   # a swap: difflib said 'rspe'
    (lambda: get("Diginetica"), "unknown dataset 'Diginetica'. Fix: did you mean 'diginetica'?"),
    (lambda: resolve({"paper": {}}, "papr", "sasrec", "sample"), "unknown preset 'papr' for model 'sasrec'. Fix: "
                                                                 "did you mean 'paper'?"),
])
def test_every_registry_gives_a_did_you_mean(lookup, fragment):
    with pytest.raises(UnknownNameError) as err:
        lookup()
    assert fragment in str(err.value)


def test_models_and_formats_give_a_did_you_mean():
    from models import build_model
    from pipeline.formats import export_dataset
    with pytest.raises(UnknownNameError, match="unknown model 'sasrek'. Fix: did you mean 'sasrec'"):
        build_model("sasrek")
    with pytest.raises(UnknownNameError, match="unknown export format 'srgn'. Fix: did you mean 'srgnn'"):
        export_dataset("nowhere", "nowhere", "srgn")


def test_messages_never_carry_control_characters():
    err = DataError("file starts with '\x1b[31mEVIL\x00\x07'\nsecond line", "use\tthe original")
    text = str(err)
    assert "\x1b" not in text and "\x00" not in text and "\n" not in text
    assert "\\x1b[31mEVIL\\x00\\x07" in text
    assert printable("a\x85b\ufffd", None) == "a\\x85b\\ufffd"
    assert printable("x" * 100, 10) == "x" * 9 + "…"


def test_a_deferred_module_is_whole_for_threads_that_touch_it_at_once():
    """importlib's LazyLoader ran the deferred import without a lock on Python 3.11: two reports in threads saw
    scipy.stats half made (`no attribute 't'`, walk 45g #1). Eight threads touch a fresh deferred module at once."""
    import subprocess
    import sys
    code = ("import threading\nfrom pipeline.lazy import lazy\nm = lazy('scipy.stats')\nerrors = []\n"
            "def use():\n    try:\n        m.t.ppf(0.975, 3); m.wilcoxon\n    except Exception as e:\n"
            "        errors.append(repr(e))\n"
            "ts = [threading.Thread(target=use) for _ in range(8)]\n[t.start() for t in ts]\n[t.join() for t in ts]\n"
            "print(errors, type(m).__name__, m.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] _Deferred scipy.stats", out
