#!/bin/sh
# Rebuilds inflection.bundle: the inflection 0.5.1 sdist from PyPI (MIT licence, see LICENSE.inflection) as a git
# repository with one commit per task base. Run from this directory; needs pip and git. The bundle is committed,
# so running the suite never downloads the library.
set -eu
here=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 -m pip download --quiet --no-binary :all: --no-deps inflection==0.5.1
tar --no-same-owner -xzf inflection-0.5.1.tar.gz
mv inflection-0.5.1 repo
cd repo
rm -rf inflection.egg-info docs/__pycache__ PKG-INFO
printf '.venv/\n__pycache__/\n*.egg-info/\n.pytest_cache/\n' > .gitignore
export GIT_AUTHOR_NAME=worktrial GIT_AUTHOR_EMAIL=examples@worktrial.invalid
export GIT_COMMITTER_NAME=worktrial GIT_COMMITTER_EMAIL=examples@worktrial.invalid
export GIT_AUTHOR_DATE=2020-08-22T00:00:00Z GIT_COMMITTER_DATE=2020-08-22T00:00:00Z
git init -q -b main
git add -A
git commit -q -m "inflection 0.5.1, from the sdist on PyPI"
git tag v0.5.1
git checkout -q --detach
# Task fix-ordinal-teens starts from a commit where 11th, 12th and 13th come out as 11st, 12nd, 13rd.
sed -i 's/if number % 100 in (11, 12, 13):/if number % 10 in (11, 12, 13):/' inflection/__init__.py
git commit -q -am "ordinal: look at the last digit only"
git tag bug-ordinal
git checkout -q --detach v0.5.1
# Task fix-uncountable-case starts from a commit where pluralize("Sheep") gives "Sheeps".
sed -i 's/if not word or word.lower() in UNCOUNTABLES:/if not word or word in UNCOUNTABLES:/' inflection/__init__.py
git commit -q -am "pluralize: skip the lower() call"
git tag bug-uncountable
git checkout -q main
git bundle create --quiet "$here/inflection.bundle" --all
cp LICENSE "$here/LICENSE.inflection"
echo "wrote $here/inflection.bundle"
