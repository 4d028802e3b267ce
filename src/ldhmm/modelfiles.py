"""Model files: load any saved model by the class it records, and use it on a user's log.

:func:`load_model` reads a file written by a model's ``save`` (the JSON format of
:meth:`ldhmm.models.variant_hmm.VariantHMM.save`) and builds the class the file names, looked up
among the registered model classes (:mod:`ldhmm.models.registry`, which the baselines and
plug-ins fill), :class:`~ldhmm.models.variant_hmm.VariantHMM` and the SVI route's
:class:`~ldhmm.models.pyro_sequence.PyroSequenceModel` (rebuilt by the factory its file names,
when the caller passes it). :func:`data_for_model` reads a
data file with any loader and maps its symbols into the model's vocabulary by name.
"""

from __future__ import annotations

from pathlib import Path

from .data import DataOptions, SequenceDatabase, recode
from .models.file_format import PYRO_CLASS, ModelFileError, read_model_json
from .models.registry import BUILTIN_CLASSES, model_class, registered

__all__ = ["load_model", "model_classes", "data_for_model"]


def model_classes() -> dict[str, type]:
    """``{class name: class}`` of every class a model file may name (imports every model's module)."""
    candidates = [model_class(name) for name in BUILTIN_CLASSES] + [spec.cls for spec in registered()]
    classes = {}
    for cls in candidates:
        if callable(getattr(cls, "load", None)):  # a class with no model file of its own is not one
            classes.setdefault(cls.__name__, cls)
    return classes


def _file_class(path: Path, name) -> type:
    # Only the module of the class the file names is imported (a baseline's library is not
    # needed to score an LDHMM).
    cls = model_class(name) if isinstance(name, str) else None
    if cls is None or not callable(getattr(cls, "load", None)):
        known = ", ".join(sorted(model_classes()))
        raise ModelFileError(path, "class", f"{name!r} is not a model class; known: {known}")
    return cls


def load_model(path, guide=None, factory=None):
    """The model saved in ``path``, as the class the file records.

    ``guide``: the guide object of a model fitted with a custom guide (saved by name only).
    ``factory``: the ``"package.module:factory"`` (or callable) that rebuilds a model of the SVI
    route (:class:`~ldhmm.models.pyro_sequence.PyroSequenceModel`): its file names it, but a
    model file never runs code by itself, so without ``factory`` such a file is refused with
    one line naming it.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        Not a model file (not JSON, a repeated key, nesting too deep, not a regular file: a
        directory, a FIFO, a device), or a class this installation does not know (one line
        naming the file).
    """
    path = Path(path)
    doc = read_model_json(path)
    if not isinstance(doc, dict) or doc.get("format") != "ldhmm":
        raise ValueError(f'{path}: not an ldhmm model file (no "format": "ldhmm")')
    name = doc.get("class")
    cls = _file_class(path, name)
    if name == PYRO_CLASS:
        return cls.load(path, factory=factory)
    if factory is not None:
        raise ValueError(f"{path}: a {name} is not rebuilt by a factory; leave out --factory")
    return cls.load(path, guide=guide)


def data_for_model(
    path, model, unknown: str = "error", options: DataOptions | None = None, **columns
) -> SequenceDatabase:
    """A data file (any format :func:`ldhmm.data.load_path` reads) in the model's codes.

    Parameters
    ----------
    path : str or Path
    model
        A fitted model; when it carries ``vocabulary_`` (the training vocabulary saved with the
        model) the file's symbols are mapped into it by name (:func:`ldhmm.data.recode`);
        without one the file's tokens must be the model's integer codes ``0..V-1``.
    unknown : {"error", "map"}
        A symbol the model has not seen: an error naming it, or the model's ``<unk>``.
    options : DataOptions, optional
        How the file is read and which of its events and sequences are used (the events are
        selected by their names in the file, before they are mapped into the model's).
    **columns
        Or the fields of a :class:`~ldhmm.data.DataOptions` (``sequence_col``, ``event_col``,
        ``time_col`` of an event log, ...), without ``options``.
    """
    if options is not None and columns:
        raise TypeError("data_for_model: pass options or its fields, not both")
    db = (options or DataOptions(**columns)).read(path)
    vocabulary = getattr(model, "vocabulary_", None)
    if vocabulary is None:
        # No saved names (a format-1 file, or a model fitted on integer codes): symbol v of
        # the model is the token "v", so a log of integer codes maps by value, and anything
        # else is an error naming the token.
        vocabulary = [str(v) for v in range(model.n_symbols_)]
    return recode(db, vocabulary, unknown=unknown)
