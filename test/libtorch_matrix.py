"""The LibTorch header matrix of test/integration/: each test runs once per
header set that is present (scripts/libtorch_sets.py), as
`integration/<set>/<file>`, with that set's substitutions (below), and with
`libtorch` and `<set>` as its only LibTorch features, so that
`REQUIRES: libtorch-2.6` or `UNSUPPORTED: libtorch-1.13` picks the runs of
one set. With no set present, each test runs once and is
unsupported (`REQUIRES: libtorch`)."""

import copy
import json

import lit.formats
import lit.Test


class HeaderSetTest(lit.Test.Test):
    """A test named integration/<set>/<file> whose script is <file>."""

    def getSourcePath(self):
        return self.file_path


def set_substitutions(name, flags):
    """%libtorch_flags (with -std=c++17), %libtorch_includes (without it),
    %libtorch_json_args (the flags as JSON strings, for a compile database)."""
    includes = [f for f in flags if not f.startswith("-std=")]
    return [("%libtorch_flags", " ".join(flags)),
            ("%libtorch_includes", " ".join(includes)),
            ("%libtorch_json_args", ", ".join(json.dumps(f) for f in flags)),
            ("%libtorch_set", name)]


class HeaderMatrix(lit.formats.ShTest):
    def __init__(self, sets, set_names):
        """sets: [(name, flags)] of the present sets; set_names: all names."""
        super().__init__(execute_external=True)
        self.sets = sets
        self.set_names = set(set_names)

    def getTestsForPath(self, testSuite, path_in_suite, litConfig, localConfig):
        for test in super().getTestsForPath(testSuite, path_in_suite, litConfig,
                                            localConfig):
            if not self.sets:
                yield test
                continue
            for name, flags in self.sets:
                config = copy.copy(localConfig)
                names = [s for s, _ in set_substitutions(name, flags)]
                config.substitutions = (
                    [s for s in localConfig.substitutions if s[0] not in names]
                    + set_substitutions(name, flags))
                config.available_features = (
                    set(localConfig.available_features) - self.set_names
                    | {"libtorch", name})
                yield HeaderSetTest(testSuite, path_in_suite[:-1] + (name, path_in_suite[-1]),
                                    config, file_path=test.getSourcePath())
