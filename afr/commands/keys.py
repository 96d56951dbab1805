"""``afr keys create|list|revoke``: project API keys in the collector's key store."""

from __future__ import annotations

import argparse
import sys

from afr.commands.common import add_data_dir_flag, collector_settings

__all__ = ["add_keys_parser"]


def add_keys_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``afr keys``."""
    keys = commands.add_parser("keys", help="manage project API keys")
    keys_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_commands.add_parser("create", help="create a key (printed once)")
    create.add_argument("--project", required=True)
    add_data_dir_flag(create)
    listing = keys_commands.add_parser("list", help="list keys (ids and last 4 characters only)")
    add_data_dir_flag(listing)
    revoke = keys_commands.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id")
    add_data_dir_flag(revoke)
    keys.set_defaults(func=_keys)


def _keys(args: argparse.Namespace) -> int:
    from collector.auth import KeyStore

    settings = collector_settings(args)
    keys = KeyStore(settings.keys_path)
    if args.keys_command == "create":
        try:
            key = keys.create(args.project)
        except ValueError as exc:
            print(f"afr keys: {exc}", file=sys.stderr)
            return 2
        print(key)
        print(
            f"(project {args.project!r}; this is the only time the key is shown)", file=sys.stderr
        )
        return 0
    if args.keys_command == "list":
        print(f"{'key id':14} {'project':20} {'last4':6} {'created':26} revoked")
        for info in keys.list():
            print(
                f"{info.key_id:14} {info.project:20} {info.last4:6} {info.created_at:26} {info.revoked_at or ''}"
            )
        return 0
    if keys.revoke(args.key_id):
        print(f"revoked {args.key_id}")
        return 0
    print(f"afr keys: no active key with id {args.key_id!r}", file=sys.stderr)
    return 1
