"""The service-configuration reference, generated from :mod:`controller.config.model`.

Every leaf key of :class:`~controller.config.model.ServiceConfig` (``leaf_keys``, declaration
order), grouped by section with the section's docstring, and per key: its type and constraint
(the same annotation reading as the policy reference, :mod:`controller.docsgen.models`), its
default, the ``AIFABRIC_*`` environment variable (:func:`controller.config.sources.env_name`)
and the ``aifabric controller`` flag that override it (:data:`controller.config.sources.FLAGS`;
not every key has one). Secrets (:data:`controller.config.model.SECRET_KEYS`) are marked.
The shipped example ``deploy/aifabric.yaml`` closes the page when the checkout has it.
"""

from __future__ import annotations

from pydantic import BaseModel, SecretStr

from controller.docsgen import REPO
from controller.docsgen.markdown import GENERATED_NOTE, code, rst_to_md, table
from controller.docsgen.models import _constraints, _default, _describe

EXAMPLE = "deploy/aifabric.yaml"


def _section_model(path: tuple[str, ...]) -> type[BaseModel]:
    from controller.config.model import ServiceConfig

    model: type[BaseModel] = ServiceConfig
    for part in path:
        ann = model.model_fields[part].annotation
        assert isinstance(ann, type) and issubclass(ann, BaseModel)
        model = ann
    return model


def config_page() -> str:
    """``reference/config.md``: every key of ``aifabric controller --config FILE``."""
    from controller.config import model as cm
    from controller.config import sources
    from controller.config.model import SECRET_KEYS, leaf_keys

    flags = {f.key: f for f in sources.FLAGS}
    groups: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for key, _ in leaf_keys():
        groups.setdefault(key[:-1], []).append(key)
    infos = dict(leaf_keys())
    out = [GENERATED_NOTE.format(what="controller/config/model.py"), "",
           "# Service configuration reference", "",
           "Every key of the controller's service configuration (`aifabric controller --config "
           "FILE`, `aifabric config show`, `aifabric doctor --config FILE`), generated from the "
           "pydantic models of `controller/config/model.py`. Each key can also be given as an "
           "`AIFABRIC_<SECTION>_<KEY>` environment variable and, where the table names one, as a "
           "flag of [`aifabric controller`](cli.md#aifabric-controller); precedence flag > "
           "environment > file > default. Unknown keys are errors; every error names "
           "`FILE:LINE:COL` and the key. See [configuration](../operator/configuration.md) for "
           "how to run the controller with it.", "",
           "The environment variable of a key is `AIFABRIC_` and the dotted key in upper case "
           "with `_` for `.`; its text is read as a YAML scalar (`true`, `0.5`, `null`). A bad "
           "value is reported as `FILE:LINE:COL: key: message` from the file, `AIFABRIC_X: key: "
           "message` from the environment, `--flag: key: message` from the command line, and "
           "nothing starts.", "",
           rst_to_md(cm.__doc__), ""]
    for section, keys in groups.items():
        title = ".".join(section) or "(top level)"
        out += [f"## `{title}`", ""]
        if section:
            doc = _section_model(section).__doc__
            if doc:
                out += [rst_to_md(doc), ""]
        rows = []
        for key in keys:
            info = infos[key]
            dotted = ".".join(key)
            text, cons, _ = _describe(info.annotation, None)
            text = text.replace(str(SecretStr), "string")  # the model's type for a secret
            cons = _constraints(list(info.metadata)) + cons
            flag = flags.get(dotted)
            flag_text = "—"
            if flag is not None:
                flag_text = ", ".join(code(d) for d in flag.decls)
                if flag.boolean:
                    flag_text += f", {code('--no-' + flag.decls[0][2:])}"
            rows.append((code(dotted) + (" (secret)" if dotted in SECRET_KEYS else ""), text,
                         _default(info), "; ".join(cons) or "—", code(sources.env_name(key)),
                         flag_text))
        out += [table(("key", "type", "default", "constraint", "environment", "flag"), rows), ""]
    example = REPO / EXAMPLE
    if example.is_file():
        out += ["## Example", "",
                f"`{EXAMPLE}`, the file the packaged service unit reads as "
                "`/etc/aifabric/aifabric.yaml`:", "",
                "```yaml", example.read_text().rstrip(), "```", ""]
    return "\n".join(out).rstrip() + "\n"
