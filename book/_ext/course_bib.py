"""Author–year labels for the bibliography, the same text as the citations.

sphinxcontrib-bibtex's ``author_year`` referencing style cites as "[Vaswani et al., 2017]": last names
(with their "von" part), "A and B" for two authors, "A et al." for three or more, then the year. The
bibliography's labels come from the pybtex formatting style instead ("[VSP+17]" in ``alpha``). This
module registers a label style that writes exactly the citation's text, and a formatting style
``course`` (unsrt's entries, sorted by author and year) that uses it: set
``bibtex_default_style: course``. book/_tools/reader_notebooks.py uses :func:`citation_text` too, so the
reader notebooks cite the same way.
"""

from __future__ import annotations

from pybtex.backends.plaintext import Backend as PlainText
from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle


# Rendered with one plain-text backend, made once: ``Text.render_as("text")`` looks the backend up
# among the installed packages' entry points on every call (tens of milliseconds in a large
# environment), and the site and every reader notebook render hundreds of names.
_PLAIN_TEXT = PlainText()


def _last_name(person) -> str:
    parts = [Text(*person.rich_prelast_names), Text(*person.rich_last_names)]
    return " ".join(part.render(_PLAIN_TEXT) for part in parts if len(part))


def citation_text(entry) -> str:
    """"Shazeer, 2019", "Cover and Thomas, 2006", "Vaswani et al., 2017" for a pybtex entry."""
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_last_name(p) for p in persons]
    if not names:
        who = Text.from_latex(entry.fields.get("title", "Anonymous")).render(_PLAIN_TEXT)
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabelStyle(BaseLabelStyle):
    """Labels equal to the author–year citation text; "a", "b" appended only if two would clash."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [citation_text(entry) for entry in entries]
        for label in set(labels):
            clashing = [i for i, other in enumerate(labels) if other == label]
            if len(clashing) > 1:
                for suffix, i in zip("abcdefghijklmnopqrstuvwxyz", clashing):
                    labels[i] = label + suffix
        yield from labels


class CourseStyle(UnsrtStyle):
    default_label_style = "course_author_year"
    default_sorting_style = "author_year_title"


def register_styles() -> None:
    register_plugin("pybtex.style.labels", "course_author_year", AuthorYearLabelStyle, force=True)
    register_plugin("pybtex.style.formatting", "course", CourseStyle, force=True)
