"""A pytest plugin for Celery's integration suite run by tests/celery: two of
its files name the hosts of Celery's docker setup in code (not from the
environment the others read); they are pointed at the services started
here instead. Nothing else of the suite changes."""
import os


def _point_at_local_services(module):
    name = module.__name__.rsplit(".", 1)[-1]
    http = os.environ.get("LAVINMQ_CELERY_HTTP")
    if name == "test_native_delayed_delivery_binding" and http:
        # its bindings are read from the management API at localhost:15672
        module.get_management_api_url = lambda: http.rstrip("/") + "/api"
    elif name == "test_rabbitmq_chord_unlock_routing" and not getattr(module, "_lavinmq_local", False):
        # its app names pyamqp://rabbit:5672 and redis://redis/0
        celery_class = module.Celery

        def local_celery(*args, broker=None, backend=None, **kwargs):
            return celery_class(*args, broker=os.environ["TEST_BROKER"], backend=os.environ["TEST_BACKEND"],
                                **kwargs)
        module.Celery = local_celery
        module._lavinmq_local = True


def pytest_collection_modifyitems(session, config, items):
    seen = set()
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and module.__name__ not in seen:
            seen.add(module.__name__)
            _point_at_local_services(module)
